#!/usr/bin/env bash
# BM25 retrieval benchmark on the shared HotpotQA corpus: ragtime (tantivy) vs bm25s (FlashRAG's BM25).
# Queries: the 250 shared IRCoT HotpotQA dev questions; relevance: their supporting paragraphs.
# Prints recall@1/3/5/10, index time, queries/s on one thread and on all threads, for both.
#
# Needs: python3 with venv; installs bm25s + PyStemmer (PyPI) into $BENCH_VENV (default target/bench-venv).
# Usage: [ROUNDS=5] scripts/bench-retrieval.sh [REPEAT]   (each timing pass runs the 250 questions REPEAT times,
# default 40; ROUNDS interleaved timing rounds, medians reported)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${SHARED_DATA:-../shared/data}
VENV=${BENCH_VENV:-target/bench-venv}
WORK=${BENCH_WORK:-target/bench-retrieval}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "bm25s==0.3.16" PyStemmer numpy scipy
fi
cargo build --release --quiet
mkdir -p "$WORK"
"$VENV/bin/python" scripts/bench_retrieval.py \
  --ragtime target/release/ragtime \
  --corpus "$DATA/corpus/hotpotqa_paragraphs.tsv" \
  --questions "$DATA/qa/hotpotqa/ircot_dev_250.jsonl" \
  --work "$WORK" --repeat "${1:-40}" --rounds "${ROUNDS:-5}"
