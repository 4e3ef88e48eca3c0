#!/usr/bin/env bash
# RaDIO's retriever table: each dynamic controller at its calibrated setting, with each retriever (BM25, dense,
# and their reciprocal-rank fusion), on one split of one dataset, then one `ragtime report` of all the runs with
# paired-bootstrap intervals against the first controller with BM25.
#
#   MODEL=checkpoints/qwen2.5-coder-0.5b-instruct.gguf THETA=0.05 ALPHA=2.3 MLP_RULE=threshold:0.99 \
#     DETECTOR=checkpoints/detector-qwen scripts/retriever-table.sh [LIMIT] [STEP]
#
# LIMIT (default 150) questions of SPLIT (default test); the runs are answered in rounds of STEP (default LIMIT)
# more questions each, so a job stopped between rounds leaves every run at the same count, and running the script
# again resumes. Env as for scripts/eval-controllers.sh (MODEL, DATASET, INDEX, BATCH, THETA, ALPHA, DETECTOR,
# MLP_RULE, BIN), plus CONTROLLERS (default "rind etc mlp"), RETRIEVERS (default "bm25 dense hybrid"), JOBS (runs
# side by side, one thread each; default 2) and OUT (default runs/retrievers-<dataset>-<split>-<model>). The index
# must hold dense vectors (`ragtime index --encoder`); a missing INDEX is built with ENCODER.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT="${1:-150}"
STEP="${2:-$LIMIT}"
MODEL="${MODEL:-checkpoints/qwen2.5-coder-0.5b-instruct.gguf}"
DATASET="${DATASET:-hotpotqa}"
SPLIT="${SPLIT:-test}"
CONTROLLERS="${CONTROLLERS:-rind etc mlp}"
RETRIEVERS="${RETRIEVERS:-bm25 dense hybrid}"
JOBS="${JOBS:-2}"
BIN="${BIN:-target/release/ragtime}"
TAG="$(basename "$MODEL" | sed 's/\.[^.]*$//')"
OUT="${OUT:-runs/retrievers-$DATASET-$SPLIT-$TAG}"
INDEX="${INDEX:-indexes/hotpotqa}"
export MODEL DATASET SPLIT BIN INDEX
mkdir -p "$OUT"
[[ -x $BIN ]] || cargo build --release -q
# Build a missing index once, before the runs start side by side.
[[ -f $INDEX/ragtime-index.json ]] || "$BIN" index --corpus ../shared/data/corpus/hotpotqa_paragraphs.tsv \
  --encoder "${ENCODER:-checkpoints/all-MiniLM-L6-v2}" --out "$INDEX"

n=0
while ((n < LIMIT)); do
  n=$((n + STEP > LIMIT ? LIMIT : n + STEP))
  running=0
  for r in $RETRIEVERS; do
    for c in $CONTROLLERS; do
      RETRIEVER="$r" CONTROLLERS="$c" JOBS=1 OUT="$OUT/$r" scripts/eval-controllers.sh "$n" >"$OUT/$r-$c.report" 2>&1 &
      running=$((running + 1))
      if ((running >= JOBS)); then
        wait -n || true
        running=$((running - 1))
      fi
    done
  done
  wait
  echo "retriever-table: $n questions per run" >&2
done

runs=()
for r in $RETRIEVERS; do
  for c in $CONTROLLERS; do [[ -f $OUT/$r/$c/predictions.jsonl ]] && runs+=("$OUT/$r/$c"); done
done
# The baseline is the first run that answers to the first controller's name: the first retriever's.
"$BIN" report --baseline "${CONTROLLERS%% *}" --html "$OUT/report.html" "${runs[@]}"

