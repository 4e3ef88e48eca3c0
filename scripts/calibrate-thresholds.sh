#!/usr/bin/env bash
# Calibrate RIND's theta and ETC's alpha for a model before comparing controllers with it: DRAGIN's and ETC's
# values were set for Llama2-7B/13B and do not transfer (with SmolLM2 the paper-form RIND score never reaches
# DRAGIN's 1.4, and ETC's alpha 1.0 fires at every word). Runs rind and etc with thresholds that never fire
# (no retrieval) on the first N shared HotpotQA questions, then prints the distribution of each score over the
# generated tokens; the
# 95th percentile is the value scripts/eval-controllers.sh takes (THETA=..., ALPHA=...). This fixes a firing
# rate, read before any answer is scored; it is not tuned on accuracy.
# Usage: scripts/calibrate-thresholds.sh [N] (default 30). MODEL=... OUT=runs/calib-<model> BIN=...
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-30}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
TAG="$(basename "$MODEL" | sed 's/\.[^.]*$//')"
OUT="${OUT:-runs/calib-$TAG}"
INDEX="${INDEX:-indexes/hotpotqa}"
BIN="${BIN:-target/release/ragtime}"
[[ -x $BIN ]] || cargo build --release -q
[[ -f $INDEX/ragtime-index.json ]] || $BIN index --corpus ../shared/data/corpus/hotpotqa_paragraphs.tsv --out "$INDEX"
mkdir -p "$OUT"
RAYON_NUM_THREADS=1 $BIN eval --dataset hotpotqa --trigger rind --index "$INDEX" --limit "$N" --model "$MODEL" \
  --set trigger.theta=1e9 --label "rind theta=1e9 (calibration)" --out "$OUT/rind" >"$OUT/rind.log" 2>&1 &
RAYON_NUM_THREADS=1 $BIN eval --dataset hotpotqa --trigger etc --index "$INDEX" --limit "$N" --model "$MODEL" \
  --set trigger.alpha=1e9 --label "etc alpha=1e9 (calibration)" --out "$OUT/etc" >"$OUT/etc.log" 2>&1 &
wait
python3 - "$OUT" "$MODEL" <<'PY'
import json, sys
out, model = sys.argv[1], sys.argv[2]
def token_scores(run):
    # one value per generated token that has a score (a word's score repeats over its sub-tokens); this is how
    # SmolLM2's theta 0.35 / alpha 3.0 were read (p95 0.355 / 2.955 on its first 30 questions)
    return sorted(abs(t["score"]) for line in open(f"{out}/{run}/predictions.jsonl") for t in json.loads(line)["trace"] if t["score"] is not None)
def pct(v, p):
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
print(f"model {model}, no-retrieval generations of {out}\n")
print("| score | scored tokens | p50 | p90 | p95 | p99 | max | retrievals |")
print("|---|---|---|---|---|---|---|---|")
for run, name in (("rind", "RIND word score (theta)"), ("etc", "ETC abs smoothed d2 (alpha)")):
    v = token_scores(run)
    retr = sum(len(json.loads(l)["retrievals"]) for l in open(f"{out}/{run}/predictions.jsonl"))
    print(f"| {name} | {len(v)} | {pct(v,50):.3f} | {pct(v,90):.3f} | {pct(v,95):.3f} | {pct(v,99):.3f} | {v[-1]:.3f} | {retr} |")
PY
