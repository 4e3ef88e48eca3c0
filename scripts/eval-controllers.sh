#!/usr/bin/env bash
# The seven training-free controllers in one decode loop on one dataset slice, then one `ragtime report`.
#
#   scripts/eval-controllers.sh [LIMIT]            # default: the first 50 shared HotpotQA questions
#
# Env: MODEL (default SmolLM2), DATASET (hotpotqa), INDEX (indexes/hotpotqa, built if missing), OUT (runs/cmp-...),
#      JOBS (2: runs side by side, one rayon thread each, which uses 2 cores better than one run with two
#      threads: decoding is a matrix-vector product per weight and runs on one thread anyway),
#      BATCH (1: questions each run answers at once, `ragtime eval --batch`; same predictions, see
#      scripts/bench-batch.sh), BIN (the ragtime binary; default target/release/ragtime), THETA / ALPHA: RIND's theta and ETC's alpha (see below), CONTROLLERS (space-separated subset;
#      add `mlp` for the learned trigger, which reads checkpoints/detector from `ragtime train detector`),
#      DETECTOR (the mlp trigger's checkpoint; default checkpoints/detector), MLP_RULE (its rule, e.g. threshold:0.99;
#      default the config's), SPLIT (answer only this split of the dataset, e.g. test; default all of it),
#      RETRIEVER (bm25, dense or hybrid; dense and hybrid need an index built with `ragtime index --encoder`:
#      a missing INDEX is built with ENCODER, default checkpoints/all-MiniLM-L6-v2 from `scripts/setup.sh --minilm`).
# Every run resumes: re-running the script after a kill finishes what is missing and re-prints the table.
#
# Thresholds: DRAGIN's theta (1.4 on HotpotQA) and ETC's alpha were set for Llama2-7B/13B; with SmolLM2 the
# paper-form RIND score never reaches 1.4 and ETC's alpha 1.0 fires at every word. The defaults here (theta 0.35,
# alpha 3.0) are the 95th percentiles of each score on no-retrieval generations of the first 30 questions
# (docs/results/calibration-thresholds-qwen-smollm2.md): they fix a firing rate and were never tuned on answers.
# Calibrate again for another model (scripts/calibrate-thresholds.sh) and record the values (they are stored in
# each run's config.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT="${1:-50}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
DATASET="${DATASET:-hotpotqa}"
INDEX="${INDEX:-indexes/hotpotqa}"
JOBS="${JOBS:-2}"
BATCH="${BATCH:-1}"
THETA="${THETA:-0.35}"
ALPHA="${ALPHA:-3.0}"
CONTROLLERS="${CONTROLLERS:-none single fixed-length fixed-sentence flare rind etc}"
DETECTOR="${DETECTOR:-checkpoints/detector}"
MLP_RULE="${MLP_RULE:-}"
SPLIT="${SPLIT:-}"
RETRIEVER="${RETRIEVER:-bm25}"
TAG="$(basename "$MODEL" | sed 's/\.[^.]*$//')"
RSUFFIX=""
[[ $RETRIEVER != bm25 ]] && RSUFFIX="-$RETRIEVER"
OUT="${OUT:-runs/cmp-$DATASET${SPLIT:+-$SPLIT}-$LIMIT-$TAG$RSUFFIX}"
BIN="${BIN:-target/release/ragtime}"
[[ -x $BIN ]] || cargo build --release -q
ENC=()
[[ $RETRIEVER != bm25 ]] && ENC=(--encoder "${ENCODER:-checkpoints/all-MiniLM-L6-v2}")
[[ -f $INDEX/ragtime-index.json ]] || $BIN index --corpus ../shared/data/corpus/hotpotqa_paragraphs.tsv "${ENC[@]}" --out "$INDEX"
mkdir -p "$OUT"

run_one() {
  local c="$1" extra=() label="$1"
  case "$c" in
    rind) extra=(--set "trigger.theta=$THETA"); label="rind theta=$THETA" ;;
    etc) extra=(--set "trigger.alpha=$ALPHA"); label="etc alpha=$ALPHA" ;;
    mlp)
      extra=(--detector "$DETECTOR")
      if [[ -n $MLP_RULE ]]; then extra+=(--set "trigger.rule=$MLP_RULE"); label="mlp $MLP_RULE"; fi ;;
  esac
  [[ -n $SPLIT ]] && extra+=(--split "$SPLIT")
  [[ $RETRIEVER != bm25 ]] && label="$label $RETRIEVER"
  RAYON_NUM_THREADS=1 $BIN eval --dataset "$DATASET" --trigger "$c" --index "$INDEX" --limit "$LIMIT" \
    --retriever "$RETRIEVER" --model "$MODEL" --batch "$BATCH" "${extra[@]}" --label "$label" --out "$OUT/$c" \
    >"$OUT/$c.log" 2>&1 \
    && echo "eval-controllers: $c done" >&2 || echo "eval-controllers: $c FAILED (see $OUT/$c.log)" >&2
}

running=0
for c in $CONTROLLERS; do
  run_one "$c" &
  running=$((running + 1))
  if ((running >= JOBS)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
runs=()
for c in $CONTROLLERS; do [[ -f $OUT/$c/predictions.jsonl ]] && runs+=("$OUT/$c"); done
$BIN report "${runs[@]}"
