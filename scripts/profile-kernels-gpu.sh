#!/usr/bin/env bash
# Where a CUDA run's GPU time goes, kernel by kernel, from CubeCL's own profiler: every kernel is launched, waited
# for and timed on the GPU, one log line each (so a profiled run is slower than a plain one; what it gives is the
# kernels, their counts and their GPU times, not the run's speed). Each step runs twice, short and long, and
# scripts/kernel_profile.py tables what the long run ran beyond the short one, per unit of the steady state:
#   generate  `ragtime generate --device cuda` on LANES prompts at once, 8 and 8 + PASSES new tokens: per decode
#             pass of LANES lanes with internals captured (the engine's `pass`)
#   train     `ragtime train autorag --device cuda --static-shapes`, 4 and 4 + UPDATES updates: per update
#             (forward, backward, optimizer step; no validation or checkpoint in between)
#
#   scripts/profile-kernels-gpu.sh [STEP...]    # generate | train (default: both)
#
# Env: BIN (ragtime binary, default target/release/ragtime), MODEL (default the Qwen2.5-Coder-0.5B GGUF),
#      TOKENIZER (train's --tokenizer; empty: the GGUF's own), DTYPE (f32 or bf16, default f32), LANES (128),
#      PASSES (32), UPDATES (8), DATA (dialogues, default datasets/autorag/smoke from
#      scripts/autorag_smoke_dialogues.py), TRAIN_EXTRA (more trainer flags), LEVEL (CubeCL's profiling level:
#      basic, default, or full, which adds each launch's kernel id and cube count), OUT (runs/profile-kernels).
# The runs happen in OUT/STEP-{short,long}/ with a cubecl.toml of their own there (CubeCL reads the nearest one
# up from the working directory), so a cubecl.toml of the user's is neither used nor touched. Compiled kernels
# go to CubeCL's cache in target/ (`[compilation] cache = "target"`), so the long run reuses the short one's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
abs() { [[ $1 = /* ]] && echo "$1" || echo "$ROOT/$1"; }
BIN=$(abs "${BIN:-target/release/ragtime}")
MODEL=$(abs "${MODEL:-checkpoints/qwen2.5-coder-0.5b-instruct.gguf}")
TOKENIZER="${TOKENIZER-}"
DTYPE="${DTYPE:-f32}" LANES="${LANES:-128}" PASSES="${PASSES:-32}" UPDATES="${UPDATES:-8}"
DATA=$(abs "${DATA:-datasets/autorag/smoke}")
LEVEL="${LEVEL:-basic}"
OUT=$(abs "${OUT:-runs/profile-kernels}")
[[ $LEVEL == basic || $LEVEL == full ]] || { echo "profile-kernels-gpu: LEVEL=$LEVEL: expected basic or full" >&2; exit 2; }
for n in LANES PASSES UPDATES; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || { echo "profile-kernels-gpu: $n=${!n}: expected a positive integer" >&2; exit 2; }
done
[[ -x $BIN ]] || { echo "profile-kernels-gpu: $BIN: no ragtime binary (cargo build --release)" >&2; exit 2; }
[[ -f $MODEL ]] || { echo "profile-kernels-gpu: $MODEL: no such model (scripts/setup.sh --model qwen)" >&2; exit 2; }
STEPS=("$@")
[[ ${#STEPS[@]} -gt 0 ]] || STEPS=(generate train)
for s in "${STEPS[@]}"; do
  [[ $s == generate || $s == train ]] || { echo "profile-kernels-gpu: unknown step '$s' (generate, train)" >&2; exit 2; }
done
mkdir -p "$OUT"

# A run folder with its own cubecl.toml: the profile log goes to DIR/kernels.log.
# A folder of that name that this script did not make (no cubecl.toml of ours in it) is refused, not replaced.
rundir() {
  local dir="$OUT/$1"
  if [[ -e $dir ]]; then
    grep -qs '^\[profiling.logger\]' "$dir/cubecl.toml" ||
      { echo "profile-kernels-gpu: $dir exists and is not a run of this script; choose another OUT" >&2; exit 2; }
    rm -rf "$dir"
  fi
  mkdir -p "$dir"
  cat >"$dir/cubecl.toml" <<EOF
[compilation]
cache = "target"

[profiling.logger]
level = "$LEVEL"
file = "$dir/kernels.log"
append = false
EOF
  echo "$dir"
}

for step in "${STEPS[@]}"; do
  case "$step" in
    generate)
      python3 scripts/nq_prompts.py "$LANES" "$(abs "${RAGTIME_DATA:-../shared/data}")" >"$OUT/prompts.jsonl"
      for run in short long; do
        new=8
        [[ $run == short ]] || new=$((8 + PASSES))
        dir=$(rundir "generate-$run")
        (cd "$dir" && "$BIN" generate --model "$MODEL" --device cuda --dtype "$DTYPE" --prompts "$OUT/prompts.jsonl" \
          --batch "$LANES" --max-new-tokens "$new" --ignore-eos --stats >/dev/null 2>"$dir/stderr.log") ||
          { tail -20 "$dir/stderr.log" >&2; exit 1; }
        tail -1 "$dir/stderr.log"
      done
      echo
      echo "### generate: one decode pass of $LANES lanes with internals ($(basename "$MODEL"), $DTYPE)"
      echo
      python3 scripts/kernel_profile.py "$OUT/generate-short/kernels.log" "$OUT/generate-long/kernels.log" \
        --units "$PASSES" | tee "$OUT/generate.md"
      ;;
    train)
      [[ -d $DATA ]] || { echo "profile-kernels-gpu: $DATA: no dialogues (scripts/autorag_smoke_dialogues.py)" >&2; exit 2; }
      tok=()
      [[ -z $TOKENIZER ]] || tok=(--tokenizer "$(abs "$TOKENIZER")")
      read -ra extra <<<"${TRAIN_EXTRA:-}"
      for run in short long; do
        steps=4
        [[ $run == short ]] || steps=$((4 + UPDATES))
        dir=$(rundir "train-$run")
        (cd "$dir" && "$BIN" train autorag --model "$MODEL" "${tok[@]}" --data "$DATA" --device cuda --dtype "$DTYPE" \
          --static-shapes --batch-size 8 --grad-accum 2 --max-len 1024 --max-steps "$steps" --eval-every 100000 \
          --save-every 100000 "${extra[@]}" --out "$dir/run" >/dev/null 2>"$dir/stderr.log") ||
          { tail -20 "$dir/stderr.log" >&2; exit 1; }
        tail -2 "$dir/stderr.log"
      done
      echo
      echo "### train autorag: one update ($(basename "$MODEL"), $DTYPE, --static-shapes, 8 x 2 rows)"
      echo
      python3 scripts/kernel_profile.py "$OUT/train-short/kernels.log" "$OUT/train-long/kernels.log" \
        --units "$UPDATES" | tee "$OUT/train.md"
      ;;
  esac
done
