#!/usr/bin/env bash
# Scale benchmark: index a synthetic corpus of N passages (default 2,000,000, DPR layout, see
# scripts/gen_synthetic_corpus.py), report passages/s, index size, peak memory and single-thread query
# latency (p50/p99) for the 250 shared HotpotQA questions, and extrapolate to DPR's 21,015,324 passages.
# Needs python3 (numpy, installed into $BENCH_VENV as bench-retrieval.sh does) and bc.
# Uses WORK (default /tmp/ragtime-scale: about 1.4 GB of corpus + the index); deleted at the end unless KEEP=1.
# Usage: scripts/bench-retrieval-scale.sh [N] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000000}
THREADS=${2:-$(nproc)}
DATA=${SHARED_DATA:-../shared/data}
WORK=${WORK:-/tmp/ragtime-scale}
BIN=target/release/ragtime
VENV=${BENCH_VENV:-target/bench-venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "bm25s==0.3.16" PyStemmer numpy scipy
fi
cargo build --release --quiet
mkdir -p "$WORK"
trap '[ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"' EXIT
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM, load $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s.%N)
"$VENV/bin/python" scripts/gen_synthetic_corpus.py "$DATA/corpus/hotpotqa_paragraphs.tsv" "$WORK/corpus.tsv" "$N"
echo "generated $N passages ($(du -h "$WORK/corpus.tsv" | cut -f1)) in $(echo "$(date +%s.%N) - $t0" | bc) s"
/usr/bin/time -f "%e %M" -o "$WORK/time.txt" \
  "$BIN" index --corpus "$WORK/corpus.tsv" --out "$WORK/index" --threads "$THREADS" --memory-mb 2048 -q | tee "$WORK/index.txt"
read -r WALL RSS_KB < "$WORK/time.txt"
SIZE=$(du -sb "$WORK/index" | cut -f1)
python3 - "$DATA/qa/hotpotqa/ircot_dev_250.jsonl" "$WORK/queries.txt" <<'PY'
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        out.write(json.loads(line)["question_text"].replace("\n", " ") + "\n")
PY
# Warm the page cache once, then measure.
"$BIN" search --index "$WORK/index" --queries "$WORK/queries.txt" -k 10 >/dev/null 2>&1
for strategy in wand exhaustive; do
  for k in 3 10; do
    "$BIN" search --index "$WORK/index" --queries "$WORK/queries.txt" -k "$k" --strategy "$strategy" 2>"$WORK/lat-$strategy-$k.txt" >/dev/null
  done
done
"$BIN" search --index "$WORK/index" --queries "$WORK/queries.txt" -k 10 --threads "$THREADS" 2>"$WORK/par.txt" >/dev/null
python3 - "$N" "$WALL" "$RSS_KB" "$SIZE" "$THREADS" "$WORK" <<'PY'
import re, sys
n, wall, rss_kb, size, threads, work = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
DPR = 21_015_324
rate = n / wall
print(f"| passages | index wall s | passages/s | index size | peak RSS | threads |")
print(f"|---|---|---|---|---|---|")
print(f"| {n:,} | {wall:.0f} | {rate:,.0f} | {size / 2**30:.2f} GiB ({size / n:.0f} B/passage) | {rss_kb / 2**20:.2f} GiB | {threads} |")
print()
print("| query strategy | k | p50 ms | p90 ms | p99 ms | queries/s (1 thread) |")
print("|---|---|---|---|---|---|")
for s in ("wand", "exhaustive"):
    for k in (3, 10):
        t = open(f"{work}/lat-{s}-{k}.txt").read()
        qps = re.search(r"([0-9.]+) queries/s", t).group(1)
        p50, p90, p99 = re.search(r"p50 ([0-9.]+) ms, p90 ([0-9.]+) ms, p99 ([0-9.]+) ms", t).groups()
        print(f"| {s} | {k} | {p50} | {p90} | {p99} | {float(qps):,.0f} |")
par = re.search(r"([0-9.]+) queries/s", open(f"{work}/par.txt").read()).group(1)
print(f"\nauto strategy, k = 10, {threads} threads: {float(par):,.0f} queries/s")
print(f"\nextrapolated to DPR's {DPR:,} passages (linear; same machine and threads): index time "
      f"{DPR / rate / 3600:.1f} h, index size {size / n * DPR / 2**30:.0f} GiB; query latency grows roughly with "
      f"posting-list length, i.e. ~{DPR / n:.1f}x for exhaustive scoring and less for block-WAND")
PY
