#!/usr/bin/env bash
# Retrieval quality of BM25, dense (all-MiniLM-L6-v2, exact search) and hybrid (RRF, k 60) on the shared HotpotQA
# corpus: recall@1/3/5/10 of the supporting paragraphs of the 250 IRCoT HotpotQA dev questions.
#
#   scripts/bench-recall.sh [ENCODER_DIR]     # default checkpoints/all-MiniLM-L6-v2 (scripts/setup.sh --minilm)
#
# Builds (or reuses) target/bench-recall/index with `ragtime index --encoder`, then `ragtime search --retriever X`.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${SHARED_DATA:-../shared/data}
WORK=${BENCH_WORK:-target/bench-recall}
ENC=${1:-checkpoints/all-MiniLM-L6-v2}
cargo build --release --quiet --bin ragtime
mkdir -p "$WORK"
cp "${CARGO_TARGET_DIR:-target}/release/ragtime" "$WORK/ragtime"
if [[ ! -f "$WORK/index/dense/dense.json" ]]; then
  "$WORK/ragtime" index --corpus "$DATA/corpus/hotpotqa_paragraphs.tsv" --out "$WORK/index" --encoder "$ENC" -q
fi
python3 scripts/recall_retrievers.py --ragtime "$WORK/ragtime" --index "$WORK/index" \
  --corpus "$DATA/corpus/hotpotqa_paragraphs.tsv" --questions "$DATA/qa/hotpotqa/ircot_dev_250.jsonl" \
  --queries-file "$WORK/queries.txt"
