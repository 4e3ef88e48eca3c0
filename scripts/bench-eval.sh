#!/usr/bin/env bash
# What capturing internals during decoding saves: DRAGIN (`rind`) on the first N shared HotpotQA questions,
# once with the attention/entropies captured as tokens are decoded (ragtime's way) and once re-running the
# model over the whole sequence before every judgement to get them (DRAGIN's code: a second forward pass with
# output_attentions=True). Both runs must take the same decisions; the table shows seconds per question,
# forward tokens and peak memory.
# Usage: scripts/bench-eval.sh [N questions] (default 10). MODEL=... DEVICE=cpu|cuda INDEX=indexes/hotpotqa
#        THETA=0.35 overrides RIND's threshold (DRAGIN's 1.4 never fires on SmolLM2; see scripts/eval-controllers.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-10}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
DEVICE="${DEVICE:-cpu}"
INDEX="${INDEX:-indexes/hotpotqa}"
BIN=target/release/ragtime
[[ -x $BIN ]] || cargo build --release -q
[[ -f $INDEX/ragtime-index.json ]] || $BIN index --corpus ../shared/data/corpus/hotpotqa_paragraphs.tsv --out "$INDEX"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for mode in captured recomputed; do
  flag=; [[ $mode == recomputed ]] && flag=--recompute-internals
  /usr/bin/time -v -o "$OUT/$mode.time" $BIN eval --dataset hotpotqa --trigger rind --index "$INDEX" --limit "$N" \
    --model "$MODEL" --device "$DEVICE" $flag ${THETA:+--set trigger.theta=$THETA} --out "$OUT/$mode" >/dev/null 2>"$OUT/$mode.log"
done
python3 - "$OUT" <<'PY'
import json, sys, re
out = sys.argv[1]
rows = {}
for mode in ("captured", "recomputed"):
    preds = [json.loads(l) for l in open(f"{out}/{mode}/predictions.jsonl")]
    t = open(f"{out}/{mode}.time").read()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) / 1024
    rows[mode] = dict(n=len(preds), sec=sum(p["seconds"] for p in preds) / len(preds),
                      fwd=sum(p["forward_tokens"] for p in preds) / len(preds),
                      ret=sum(len(p["retrievals"]) for p in preds) / len(preds),
                      preds=[p["prediction"] for p in preds], rss=rss)
print("| internals | questions | s/question | forward tokens/q (decode loop) | retrievals/q | peak RSS MiB |")
print("|---|---|---|---|---|---|")
for m, r in rows.items():
    print(f"| {m} | {r['n']} | {r['sec']:.2f} | {r['fwd']:.0f} | {r['ret']:.2f} | {r['rss']:.0f} |")
c, r = rows["captured"], rows["recomputed"]
print(f"\nspeed-up from capturing: {r['sec'] / c['sec']:.2f}x; same predictions: {c['preds'] == r['preds']}")
PY
