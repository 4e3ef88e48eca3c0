#!/usr/bin/env bash
# The GPU measurements that docs/gpu.md and docs/engine.md list as not yet made, in one command on a GPU machine,
# most wanted first, under one deadline: a short time on the GPU gets the top of the list, a longer one more of
# it, and every step that ran is written down before the deadline. Each step runs in its own process under a time limit
# (the smaller of its cap and the time left); its table goes to OUT/STEP.md, its log to OUT/STEP.log, and its
# outcome (done, failed with its exit code, cut at its limit, skipped for lack of time or input) to
# OUT/summary.md, which is printed at the end. ARCHIVE=FILE.tar.gz is rewritten after every step, so that a command
# killed from outside still leaves the steps before.
#
#   scripts/gpu-suite.sh [STEP...]        # default: every step below, in this order
#   DRY=1 scripts/gpu-suite.sh            # the plan: each step's cap, minimum and what it lacks; runs nothing
#
# Bulky outputs (exports, checkpoints, kernel logs, synthetic stores) go to WORK, not OUT, so that OUT and its
# archive hold tables and logs only.
#
# Step (cap s / minimum s to start)  what it measures
#   env         (30 / 1)     GPU, driver, PyTorch and transformers versions, the binary's version
#   reductions  (90 / 20)    row reductions in one pass against in stages (bench_staged_reductions cuda; burn.md 6)
#   tests       (240 / 60)   the CUDA tests of the packed test binaries (each with --ignored cuda): the GPU's
#                            results against the CPU's and transformers', before any speed is read
#   generate    (300 / 90)   decoding tokens/s with internals at LANES beside transformers f32 (bench-generate.sh)
#   profile     (240 / 90)   kernel by kernel: a 128-lane decode pass and a training update (profile-kernels-gpu.sh)
#   fusion      (240 / 90)   the cuda-fusion build's decoding beside the default build's, at 1 and 128 lanes
#   synth       (240 / 60)   synth autorag questions/s at 64 lanes over 128 BioASQ questions (builds indexes/bioasq)
#   train       (300 / 120)  train autorag --static-shapes, one epoch, beside PyTorch's replay (bench-train-autorag-gpu.sh)
#   train-lora  (240 / 120)  the same with --lora 16
#   train-pack  (240 / 120)  the same with --pack
#   detector    (240 / 120)  train detector on 200k rows: first (compiling) and second epoch on CUDA
#                            (bench-detector-memory.sh; the CPU's rows are in docs/results)
#   compile     (300 / 150)  transformers' static-cache torch.compile rows at LANES (bench-generate.sh HF_COMPILE=1)
#
# Env: BINDIR  the unpacked tar of scripts/pack-prebuilt.sh (ragtime, bench_staged_reductions, fake_label_store,
#              tests/, and ragtime-cuda-fusion when packed with VARIANTS="cuda-fusion"); default /tmp/b
#      MODEL   qwen or smollm2 (default qwen when its GGUF is in checkpoints/, else smollm2)
#      DEADLINE seconds for the whole suite (default 540); RESERVE seconds kept back for the archive (default 10)
#      LANES   generate's and compile's lane counts (default "1 8 32 128"); NEW new tokens per prompt (default 32)
#      OUT     results folder (default runs/gpu-suite); ARCHIVE a .tar.gz of OUT, rewritten after each step (a file
#              that exists before the run is someone else's: refused)
#      WORK    the steps' bulky outputs (default runs/gpu-suite-work)
# Data as everywhere: RAGTIME_DATA or ../shared/data (qa/nq, qa/bioasq, qa/hotpotqa, models/ for SmolLM2's tokenizer).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SELF="$ROOT/scripts/gpu-suite.sh"
BINDIR="${BINDIR:-/tmp/b}"
DATA_DIR="${RAGTIME_DATA:-../shared/data}"
OUT="${OUT:-runs/gpu-suite}"
WORK="${WORK:-runs/gpu-suite-work}"
LANES="${LANES:-1 8 32 128}"
NEW="${NEW:-32}"
DEADLINE="${DEADLINE:-540}"
RESERVE="${RESERVE:-10}"
DRY="${DRY:-0}"
declare -A GGUF=([qwen]=checkpoints/qwen2.5-coder-0.5b-instruct.gguf [smollm2]=checkpoints/smollm2-135m-instruct-q4_1.gguf)
if [[ -z ${MODEL:-} ]]; then
  MODEL=smollm2
  [[ -f ${GGUF[qwen]} ]] && MODEL=qwen
fi
[[ -n ${GGUF[$MODEL]:-} ]] || { echo "gpu-suite: MODEL=$MODEL: expected qwen or smollm2" >&2; exit 2; }
GG="${GGUF[$MODEL]}"
# the trainers' tokenizer: Qwen's GGUF carries its own; SmolLM2's comes from the shared data (as the GPU runs so far)
TOK=""
[[ $MODEL == qwen ]] || TOK="$DATA_DIR/models/smollm2-135m-instruct/tokenizer.json"
for n in DEADLINE RESERVE NEW; do
  [[ ${!n} =~ ^[0-9]+$ ]] || { echo "gpu-suite: $n=${!n}: expected a whole number of seconds or tokens" >&2; exit 2; }
done

ALL=(env reductions tests generate profile fusion synth train train-lora train-pack detector compile)
declare -A CAP=([env]=30 [reductions]=90 [generate]=300 [profile]=240 [fusion]=240 [synth]=240 [train]=300
  [train-lora]=240 [train-pack]=240 [detector]=240 [compile]=300 [tests]=240)
declare -A MIN=([env]=1 [reductions]=20 [generate]=90 [profile]=90 [fusion]=90 [synth]=60 [train]=120
  [train-lora]=120 [train-pack]=120 [detector]=120 [compile]=150 [tests]=60)

# What a step needs before it can run: an empty line, or what is missing.
missing() {
  case "$1" in
    env) ;;
    reductions) [[ -x $BINDIR/bench_staged_reductions ]] || echo "$BINDIR/bench_staged_reductions" ;;
    fusion) [[ -x $BINDIR/ragtime-cuda-fusion ]] || echo "$BINDIR/ragtime-cuda-fusion (VARIANTS=cuda-fusion scripts/pack-prebuilt.sh)" ;;
    detector) [[ -x $BINDIR/fake_label_store ]] || echo "$BINDIR/fake_label_store" ;;
    tests) compgen -G "$BINDIR/tests/*" >/dev/null || echo "$BINDIR/tests/*" ;;
    synth) [[ -d $DATA_DIR/qa/bioasq ]] || echo "$DATA_DIR/qa/bioasq" ;;
    train | train-lora | train-pack | profile)
      [[ -f $DATA_DIR/qa/hotpotqa/ircot_dev_250.jsonl || -f datasets/autorag/smoke/dialogues.jsonl ]] ||
        echo "$DATA_DIR/qa/hotpotqa/ircot_dev_250.jsonl (for the smoke dialogues)" ;;
  esac
  # every other step runs ragtime on the model
  case "$1" in
    env | reductions | tests) ;;
    *)
      [[ -f $GG ]] || echo "$GG (scripts/setup.sh --model $MODEL)"
      [[ -x $BINDIR/ragtime ]] || echo "$BINDIR/ragtime"
      ;;
  esac
}

# The template dialogues the trainer benchmarks fine-tune on (scripts/autorag_smoke_dialogues.py), made once.
smoke() { [[ -f datasets/autorag/smoke/dialogues.jsonl ]] || python3 scripts/autorag_smoke_dialogues.py >/dev/null; }

# One step, run in a process of its own: its table on stdout, its log on stderr.
one() {
  local dir="$WORK/$1"
  rm -rf "$dir"
  case "$1" in
    env)
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
      python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' || true
      "$BINDIR/ragtime" --version || true
      echo "model: $GG ($(du -h "$GG" 2>/dev/null | cut -f1)); lanes: $LANES; $(nproc) CPU cores"
      ;;
    reductions) "$BINDIR/bench_staged_reductions" cuda ;;
    generate)
      BIN="$BINDIR/ragtime" DEVICE=cuda MODELS="$MODEL" BATCHES="$LANES" NEW="$NEW" DTYPES=f32 HF_DTYPES=f32 REF_ROW=0 \
        STATS_LOG="$OUT/generate.stats" scripts/bench-generate.sh
      ;;
    profile)
      smoke
      BIN="$BINDIR/ragtime" MODEL="$GG" TOKENIZER="$TOK" OUT="$dir" LANES=128 scripts/profile-kernels-gpu.sh generate train
      ;;
    fusion)
      local b
      for b in "$BINDIR/ragtime" "$BINDIR/ragtime-cuda-fusion"; do
        echo "#### $(basename "$b")"
        BIN="$b" DEVICE=cuda MODELS="$MODEL" BATCHES="1 128" NEW="$NEW" DTYPES=f32 HF=0 REF_ROW=0 scripts/bench-generate.sh
      done
      ;;
    synth)
      if [[ ! -f indexes/bioasq/ragtime-index.json ]]; then
        mkdir -p runs/bioasq
        "$BINDIR/ragtime" data corpus bioasq --kinds yes_no,span --out runs/bioasq/corpus.jsonl >&2
        "$BINDIR/ragtime" index --corpus runs/bioasq/corpus.jsonl --out indexes/bioasq >&2
      fi
      # bench-generate.sh goes on past a failed synthesis run (its error on stderr): no row is a failure here
      local table
      table=$(BIN="$BINDIR/ragtime" DEVICE=cuda MODELS="$MODEL" DECODE=0 HF=0 SYNTH_AUTORAG=64 SYNTH_QUESTIONS=128 \
        scripts/bench-generate.sh)
      echo "$table"
      grep -q '^| 64 |' <<<"$table" || { echo "synth autorag gave no row (its error above)" >&2; return 1; }
      ;;
    train | train-lora | train-pack)
      smoke
      local extra="--static-shapes"
      [[ $1 == train-lora ]] && extra="--static-shapes --lora 16"
      [[ $1 == train-pack ]] && extra="--static-shapes --pack"
      BIN="$BINDIR/ragtime" MODEL="$GG" TOKENIZER="$TOK" OUT="$dir" EPOCHS=1 EXTRA="$extra" \
        scripts/bench-train-autorag-gpu.sh ragtime torch table
      ;;
    detector)
      mkdir -p "$dir"
      # the trainer's own output stays in WORK (stdout, stderr): its last lines come to the log when it fails
      BIN="$BINDIR/ragtime" FAKE="$BINDIR/fake_label_store" WORK="$dir" DEVICES=cuda EPOCHS=2 MODES=memory \
        scripts/bench-detector-memory.sh 200000 || { tail -5 "$dir/stderr" >&2 2>/dev/null; return 1; }
      rm -rf "$dir"/rows-* # the synthetic store: 200k rows, not a result
      ;;
    compile)
      BIN="$BINDIR/ragtime" DEVICE=cuda MODELS="$MODEL" BATCHES="$LANES" NEW="$NEW" DTYPES=f32 HF_DTYPES=bf16 REF_ROW=0 \
        HF_COMPILE=1 scripts/bench-generate.sh
      ;;
    tests)
      # a test binary reads checkpoints/ under the folder it was built in (pack-prebuilt.sh writes it to built-in)
      # and the shared data through RAGTIME_DATA: where that folder is missing here, it becomes a link to this checkout
      local built
      built=$(cat "$BINDIR/built-in" 2>/dev/null || true)
      if [[ -n $built && ! -e $built ]]; then
        mkdir -p "$(dirname "$built")" && ln -s "$ROOT" "$built" && echo "linked $built -> $ROOT" >&2
      fi
      export RAGTIME_DATA
      RAGTIME_DATA=$(cd "$DATA_DIR" && pwd)
      # each binary's test lines here, its whole output (a failure's panic message too) in the log
      local t rc=0 out
      for t in "$BINDIR"/tests/*; do
        echo "#### $(basename "$t")"
        out=$("$t" --ignored cuda 2>&1) || rc=1
        grep -E '^(test |test result)' <<<"$out" || true
        echo "$out" >&2
      done
      return "$rc"
      ;;
  esac
}

if [[ ${1:-} == --one ]]; then
  one "$2"
  exit
fi

STEPS=("$@")
[[ ${#STEPS[@]} -gt 0 ]] || STEPS=("${ALL[@]}")
for s in "${STEPS[@]}"; do
  [[ -n ${CAP[$s]:-} ]] || { echo "gpu-suite: unknown step '$s' (${ALL[*]})" >&2; exit 2; }
done

if [[ $DRY == 1 ]]; then
  echo "model $MODEL ($GG), deadline $DEADLINE s, binaries in $BINDIR, results in $OUT"
  for s in "${STEPS[@]}"; do
    need=$(missing "$s")
    printf '%-11s cap %3s s, starts with >= %3s s left%s\n' "$s" "${CAP[$s]}" "${MIN[$s]}" "${need:+; missing: ${need//$'\n'/, }}"
  done
  exit 0
fi

# OUT and WORK are this script's own: a folder of that name without its summary (OUT) or its mark (WORK) is
# someone else's and is left alone; in its own WORK a step starts from an empty folder (a trainer's checkpoint
# left from an earlier run would be resumed, not timed)
if [[ -e $OUT && ! -f $OUT/summary.md ]]; then
  echo "gpu-suite: $OUT exists and is not a results folder of this script; choose another OUT" >&2
  exit 2
fi
if [[ -e $WORK && ! -f $WORK/.gpu-suite ]]; then
  echo "gpu-suite: $WORK exists and is not a work folder of this script; choose another WORK" >&2
  exit 2
fi
if [[ -n ${ARCHIVE:-} && -e $ARCHIVE ]]; then
  echo "gpu-suite: ARCHIVE=$ARCHIVE exists; remove it or name another" >&2
  exit 2
fi
mkdir -p "$OUT" "$WORK"
touch "$WORK/.gpu-suite"
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
start=$(date +%s)
{
  echo "# gpu-suite: $MODEL, deadline $DEADLINE s, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| step | outcome | seconds | limit s |"
  echo "|---|---|---:|---:|"
} >"$OUT/summary.md"

archive() {
  if [[ -n ${ARCHIVE:-} ]]; then
    tar czf "$ARCHIVE.tmp" -C "$(dirname "$OUT")" "$(basename "$OUT")" && mv "$ARCHIVE.tmp" "$ARCHIVE" ||
      echo "gpu-suite: could not write $ARCHIVE" >&2
  fi
}

for s in "${STEPS[@]}"; do
  left=$((DEADLINE - RESERVE - ($(date +%s) - start)))
  need=$(missing "$s")
  if [[ -n $need ]]; then
    echo "| $s | skipped: missing ${need//$'\n'/, } | 0 | - |" >>"$OUT/summary.md"
    continue
  fi
  if ((left < MIN[$s])); then
    echo "| $s | skipped: $left s left, needs $((MIN[$s])) | 0 | - |" >>"$OUT/summary.md"
    continue
  fi
  limit=$((left < CAP[$s] ? left : CAP[$s]))
  echo "gpu-suite: $s (limit $limit s, $left s left)" >&2
  t0=$(date +%s)
  rc=0
  OUT="$OUT" WORK="$WORK" timeout -k 5 "$limit" "$SELF" --one "$s" >"$OUT/$s.md" 2>"$OUT/$s.log" || rc=$?
  took=$(($(date +%s) - t0))
  case $rc in
    0) outcome=done ;;
    124 | 137) outcome="cut at its limit" ;;
    *) outcome="failed (exit $rc): $(tail -1 "$OUT/$s.log" | tr '|' '/' | cut -c1-160)" ;;
  esac
  echo "| $s | $outcome | $took | $limit |" >>"$OUT/summary.md"
  archive
done
echo >>"$OUT/summary.md"
echo "total $(($(date +%s) - start)) s" >>"$OUT/summary.md"
archive
cat "$OUT/summary.md"
