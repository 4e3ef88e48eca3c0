#!/usr/bin/env bash
# Per-shard rates of the four sharded jobs on this machine, and what they project for full-size runs on 100 shards
# (docs/cluster.md). Each job runs one or two shards here; the shard's completion marker gives its items, rows and
# seconds (from start to marker: reading the input and loading the model included). Where a shard must read the
# whole input whatever its size (index: the corpus stream; synth hallucination: the whole dump, for the gazetteer),
# two shard sizes separate that fixed cost from the per-item cost, and the projection is
#   fixed cost x (full input / input here) + (items / 100) x per-item cost.
#
#   scripts/bench-shards.sh            (MODEL=... for another model; N_PASSAGES=... for the synthetic corpus)
set -euo pipefail
cd "$(dirname "$0")/.."
RAGTIME=${RAGTIME:-target/release/ragtime}
DATA=${RAGTIME_DATA:-../shared/data}
MODEL=${MODEL:-checkpoints/qwen2.5-coder-0.5b-instruct.gguf}
N_PASSAGES=${N_PASSAGES:-1000000}
[ -x "$RAGTIME" ] || { echo "bench-shards.sh: build first (cargo build --release)" >&2; exit 2; }
[ -f "$MODEL" ] || { echo "bench-shards.sh: $MODEL missing (scripts/setup.sh --model qwen)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ragtime-bench-shards.XXXXXX")
marker() { # dir shard -> "items rows seconds"
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["items"], m["rows"], round(m["seconds"], 2))' "$1/$2.done"
}
# fixed + per-item cost from two shards: (items_a, secs_a), (items_b, secs_b)
solve() {
  python3 -c 'import sys; a,ta,b,tb=map(float,sys.argv[1:]); assert a != b, "two shards of the same size"; k=(tb-ta)/(b-a); print(f"{max(ta-k*a,0):.2f} {k:.5f}")' "$@"
}

echo "corpus: $N_PASSAGES synthetic passages ($work)" >&2
VENV=${BENCH_VENV:-target/bench-venv}   # numpy, for the synthetic corpus (as bench-retrieval-scale.sh)
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q numpy
fi
"$VENV/bin/python" scripts/gen_synthetic_corpus.py "$DATA/corpus/hotpotqa_paragraphs.tsv" "$work/c.tsv" "$N_PASSAGES"
"$RAGTIME" index --corpus "$work/c.tsv" --out "$work/idx100" --shard 0/100 --threads 2 -q
"$RAGTIME" index --corpus "$work/c.tsv" --out "$work/idx4" --shard 1/4 --threads 2 -q
read -r ia _ ta < <(marker "$work/idx100" part-00000-of-00100)
read -r ib _ tb < <(marker "$work/idx4" part-00001-of-00004)
read -r index_fixed index_per < <(solve "$ia" "$ta" "$ib" "$tb")

wiki=$DATA/wiki/dump_train
articles=$(find "$wiki" -type f | xargs cat | grep -c '"id"' || true)
synth() { "$RAGTIME" synth hallucination --wiki "$wiki" --model "$MODEL" --out "$work/synth-$1" --shard "$2" --batch 8 >/dev/null 2>&1; }
# two shard sizes, not nested in each other (0/3000 would lie inside 0/1000)
synth a 0/3000
synth b 0/700
read -r sa ra ta_s < <(marker "$work/synth-a" part-00000-of-03000)
read -r sb rb tb_s < <(marker "$work/synth-b" part-00000-of-00700)
read -r synth_fixed synth_per < <(solve "$sa" "$ta_s" "$sb" "$tb_s")

"$RAGTIME" eval --dataset hotpotqa --split valid --trigger rind --model "$MODEL" --shard 0/10 --batch 4 \
  --out "$work/eval" >/dev/null 2>&1
read -r ei er et < <(marker "$work/eval" part-00000-of-00010)

"$RAGTIME" synth autorag --dataset nq --model "$MODEL" --index indexes/hotpotqa --limit 40 --shard 0/20 \
  --out "$work/autorag" >/dev/null 2>&1 || echo "synth autorag failed; its row is left out" >&2
auto=$(marker "$work/autorag" part-00000-of-00020 2>/dev/null || echo "")

python3 - "$N_PASSAGES" "$index_fixed" "$index_per" "$ia" "$ta" "$ib" "$tb" \
  "$articles" "$synth_fixed" "$synth_per" "$sa" "$ra" "$ta_s" "$sb" "$rb" "$tb_s" "$ei" "$er" "$et" "$MODEL" "$auto" <<'PY'
import sys
a = sys.argv[1:]
N, ifix, iper, ia, ta, ib, tb = int(a[0]), float(a[1]), float(a[2]), int(a[3]), float(a[4]), int(a[5]), float(a[6])
art, sfix, sper = int(a[7]), float(a[8]), float(a[9])
sa, ra, tsa, sb, rb, tsb = int(a[10]), int(a[11]), float(a[12]), int(a[13]), int(a[14]), float(a[15])
ei, er, et, model, auto = int(a[16]), int(a[17]), float(a[18]), a[19], a[20]
def hms(s):
    return f"{s/3600:.1f} h" if s >= 3600 else f"{s/60:.1f} min"
rows = []
# index: fixed cost scales with the corpus read by every shard
full = 21_015_324
idx_proj = ifix * full / N + (full / 100) * iper
rows.append(("index (BM25)", f"{ib} passages", f"{tb:.1f}", f"{ib/tb:.0f} passages/s", f"corpus scan {ifix:.1f} s per {N/1e6:.0f}M, {1/iper:.0f} passages/s indexed",
             f"DPR 21M passages: {hms(idx_proj)} per shard"))
wiki = 6_000_000
lab_per_article = rb / sb if sb else 0
syn_proj = sfix * wiki / art + (wiki / 100) * sper
rows.append(("synth hallucination", f"{sb} articles, {rb} labels", f"{tsb:.1f}", f"{rb/tsb:.2f} labels/s",
             f"dump + model {sfix:.1f} s per {art} articles, {sper:.1f} s per article ({lab_per_article:.1f} labels)",
             f"6M articles: {hms(syn_proj)} per shard"))
rows.append(("eval (rind, hotpotqa)", f"{ei} questions", f"{et:.1f}", f"{ei/et:.3f} questions/s", "",
             f"HotpotQA dev 7,405 questions: {hms(7405/100*et/max(ei,1))} per shard"))
if auto:
    ai, ar, at = auto.split()
    ai, ar, at = int(ai), int(ar), float(at)
    rows.append(("synth autorag", f"{ai} questions, {ar} kept", f"{at:.1f}", f"{ai/at:.3f} questions/s", "",
                 f"10k questions: {hms(10000/100*at/max(ai,1))} per shard"))
print(f"Sharded jobs on this machine (2 cores per shard), model {model.split('/')[-1]}; projections for 100 shards of this size\n")
print("| job | shard here | seconds | rate per shard | fixed vs per-item cost | projected wall time on 100 shards |")
print("|---|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY
