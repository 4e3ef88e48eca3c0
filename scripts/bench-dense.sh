#!/usr/bin/env bash
# Dense retrieval benchmark, one run, one Markdown table: ragtime beside sentence-transformers (passage encoding,
# same threads and batch size) and faiss-cpu IndexHNSWFlat (HNSW build time, peak memory, query latency p50/p99,
# recall@10 vs exact, same synthetic vectors, same M / efConstruction / efSearch).
#
#   scripts/bench-dense.sh [N]        # N synthetic vectors (default 1,000,000 x 384)
#   THREADS=2 BATCH=32 PASSAGES=2000 DIM=384 CLUSTERS=1000 SPREAD=1 M=32 EFC=200 EFS=128 EF_SWEEP=16,32,64,256 F16=1 QUERIES=1000 \
#     scripts/bench-dense.sh 100000     (CLUSTERS=0: uniform random vectors, the hardest case for HNSW)
#
# Needs checkpoints/all-MiniLM-L6-v2 (scripts/setup.sh --minilm) and the Python environment of scripts/st_venv.sh
# (torch, sentence-transformers, faiss-cpu from PyPI; made on first use). On a 2-core machine 1M vectors take tens
# of minutes per system to index: docs/results/bench-dense.md says which N was run.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${SHARED_DATA:-../shared/data}
WORK=${BENCH_WORK:-target/bench-dense}
PY="$(scripts/st_venv.sh)"
[[ -d checkpoints/all-MiniLM-L6-v2 ]] || { echo "bench-dense: checkpoints/all-MiniLM-L6-v2 missing: run scripts/setup.sh --minilm" >&2; exit 1; }
cargo build --release --quiet --bin ragtime --example bench_hnsw
TARGET=${CARGO_TARGET_DIR:-target}
mkdir -p "$WORK"
# Copies: another build in the same target folder must not swap the binaries mid-run.
cp "$TARGET/release/ragtime" "$WORK/ragtime"
cp "$TARGET/release/examples/bench_hnsw" "$WORK/bench_hnsw"
"$PY" scripts/bench_dense.py --ragtime "$WORK/ragtime" --bench-hnsw "$WORK/bench_hnsw" \
  --model checkpoints/all-MiniLM-L6-v2 --corpus "$DATA/corpus/hotpotqa_paragraphs.tsv" --work "$WORK" \
  --threads "${THREADS:-$(nproc)}" --batch "${BATCH:-32}" --passages "${PASSAGES:-2000}" \
  --n "${1:-1000000}" --dim "${DIM:-384}" --queries "${QUERIES:-1000}" --clusters "${CLUSTERS:-1000}" --spread "${SPREAD:-1}" \
  --m "${M:-32}" --ef-construction "${EFC:-200}" --ef-search "${EFS:-128}" --ef-sweep "${EF_SWEEP:-16,32,64,256}" ${F16:+--f16}
