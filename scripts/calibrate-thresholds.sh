#!/usr/bin/env bash
# Calibrate RIND's theta and ETC's alpha for a model before comparing controllers with it: DRAGIN's and ETC's
# values were set for Llama2-7B/13B and do not transfer (with SmolLM2 the paper-form RIND score never reaches
# DRAGIN's 1.4, and ETC's alpha 1.0 fires at every word). Runs rind and etc with thresholds that never fire
# (no retrieval) on the first N shared HotpotQA questions, then prints the distribution of each score over the
# generated tokens; the
# 95th percentile is the value scripts/eval-controllers.sh takes (THETA=..., ALPHA=...). This fixes a firing
# rate, read before any answer is scored; it is not tuned on accuracy.
# With DETECTOR=DIR (a `ragtime train detector` checkpoint for this model) the mlp trigger is calibrated the same
# way: its rule `threshold:1` never fires, and the percentiles of the detector's per-token score give
# MLP_RULE=threshold:<p95> for scripts/eval-controllers.sh. DETECTOR=DIR1,DIR2 scores the same generation with
# each detector (runs mlp-<name of DIR>).
# With FIRE="rind=0.06 etc=1.5 mlp-NAME=0.9999 ..." (a run's name, and the threshold it fires above) it also
# prints where each trigger would first fire in these no-retrieval answers (up to its first retrieval, the answer
# is the same with retrieval): on how many questions, at which token, and whether that token is a function word
# or punctuation, part of the answer after "So the answer is", or some other content word.
# Usage: scripts/calibrate-thresholds.sh [N] (default 30). MODEL=... OUT=runs/calib-<model> BIN=... DETECTOR=...
# SPLIT=valid (the dataset's split; default: the file from its start) BATCH=B (lanes) FIRE=...
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-30}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
TAG="$(basename "$MODEL" | sed 's/\.[^.]*$//')"
OUT="${OUT:-runs/calib-$TAG}"
INDEX="${INDEX:-indexes/hotpotqa}"
BIN="${BIN:-target/release/ragtime}"
EVAL_ARGS=()
[[ -n ${SPLIT:-} ]] && EVAL_ARGS=(--split "$SPLIT")
[[ -n ${BATCH:-} ]] && EVAL_ARGS+=(--batch "$BATCH")
[[ -x $BIN ]] || cargo build --release -q
[[ -f $INDEX/ragtime-index.json ]] || $BIN index --corpus ../shared/data/corpus/hotpotqa_paragraphs.tsv --out "$INDEX"
mkdir -p "$OUT"
RAYON_NUM_THREADS=1 $BIN eval --dataset hotpotqa --trigger rind --index "$INDEX" --limit "$N" --model "$MODEL" \
  "${EVAL_ARGS[@]}" --set trigger.theta=1e9 --label "rind theta=1e9 (calibration)" --out "$OUT/rind" >"$OUT/rind.log" 2>&1 &
RAYON_NUM_THREADS=1 $BIN eval --dataset hotpotqa --trigger etc --index "$INDEX" --limit "$N" --model "$MODEL" \
  "${EVAL_ARGS[@]}" --set trigger.alpha=1e9 --label "etc alpha=1e9 (calibration)" --out "$OUT/etc" >"$OUT/etc.log" 2>&1 &
wait
MLP_RUNS=()
if [[ -n ${DETECTOR:-} ]]; then
  IFS=, read -ra DETECTORS <<<"$DETECTOR"
  for d in "${DETECTORS[@]}"; do
    run=mlp
    [[ ${#DETECTORS[@]} -gt 1 ]] && run="mlp-$(basename "$d")"
    MLP_RUNS+=("$run")
    $BIN eval --dataset hotpotqa --trigger mlp --detector "$d" --index "$INDEX" --limit "$N" --model "$MODEL" \
      "${EVAL_ARGS[@]}" --set trigger.rule=threshold:1 --label "$run threshold:1 (calibration)" --out "$OUT/$run" \
      >"$OUT/$run.log" 2>&1
  done
fi
python3 - "$OUT" "$MODEL" "${FIRE:-}" "${MLP_RUNS[@]}" <<'PY'
import json, os, re, sys
out, model, fire, mlp_runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def token_scores(run):
    # one value per generated token that has a score (a word's score repeats over its sub-tokens); this is how
    # SmolLM2's theta 0.35 / alpha 3.0 were read (p95 0.355 / 2.955 on its first 30 questions)
    return sorted(abs(t["score"]) for line in open(f"{out}/{run}/predictions.jsonl") for t in json.loads(line)["trace"] if t["score"] is not None)
def pct(v, p):
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
print(f"model {model}, no-retrieval generations of {out}\n")
print("| score | scored tokens | p50 | p90 | p95 | p99 | max | retrievals |")
print("|---|---|---|---|---|---|---|---|")
runs = [("rind", "RIND word score (theta)"), ("etc", "ETC abs smoothed d2 (alpha)")]
for run in mlp_runs:
    runs.append((run, f"{run}: detector P(hallucinated) (mlp threshold)"))
for run, name in runs:
    v = token_scores(run)
    retr = sum(len(json.loads(l)["retrievals"]) for l in open(f"{out}/{run}/predictions.jsonl"))
    print(f"| {name} | {len(v)} | {pct(v,50):.4f} | {pct(v,90):.4f} | {pct(v,95):.4f} | {pct(v,99):.4f} | {v[-1]:.4f} | {retr} |")

# How well each score, before any retrieval, tells a wrong answer from a right one: per question the highest
# score over the generated tokens, against "the answer is wrong" (F1 < 0.5); ROC-AUC by the Mann-Whitney count
# (ties count one half). The same generation is scored by every trigger, so the rows compare signals, not texts.
def auc(pos, neg):
    if not pos or not neg:
        return float("nan")
    return sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))
print("\nPer question, the highest score vs. a wrong answer (F1 < 0.5) of the same no-retrieval generation:\n")
print("| score | questions | wrong | ROC-AUC (max score) | ROC-AUC (mean score) |")
print("|---|---|---|---|---|")
for run, name in runs:
    rows = [json.loads(l) for l in open(f"{out}/{run}/predictions.jsonl")]
    agg = {"max": ([], []), "mean": ([], [])}
    for r in rows:
        v = [abs(t["score"]) for t in r["trace"] if t["score"] is not None] or [0.0]
        wrong = r["metrics"]["f1"] < 0.5
        agg["max"][0 if wrong else 1].append(max(v))
        agg["mean"][0 if wrong else 1].append(sum(v) / len(v))
    n_wrong = len(agg["max"][0])
    print(f"| {name} | {len(rows)} | {n_wrong} | {auc(*agg['max']):.3f} | {auc(*agg['mean']):.3f} |")

# Where each trigger would first fire: the first scored token above its threshold. Before a trigger's first
# retrieval its answer is this one, so this is where the first retrieval of `eval --trigger T` lands.
if fire:
    FUNCTION = set("""a an the of in on at to for from by with as and or but is are was were be been being has have
        had do does did it its this that these those which who whom whose what when where why how he she they his her
        their there here so than then not no also into about after before during over under between through""".split())
    def kind(text, pos, answer_start):
        w = text.strip().lower()
        if answer_start is not None and pos >= answer_start:
            return "answer"
        if not re.search(r"[a-z0-9]", w):
            return "punctuation"
        return "function word" if w in FUNCTION else "content word"
    print("\nWhere each trigger first fires in the no-retrieval answers (token = position in the answer):\n")
    print("| trigger | threshold | fires on | on wrong answers (F1 < 0.5) | on right answers | first token (median) | function word | punctuation | content word | in the final answer |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for spec in fire.split():
        run, _, thr = spec.partition("=")
        try:
            thr = float(thr)
        except ValueError:
            sys.exit(f"calibrate-thresholds.sh: FIRE entry {spec!r} is not RUN=THRESHOLD (a number)")
        if not os.path.isfile(f"{out}/{run}/predictions.jsonl"):
            sys.exit(f"calibrate-thresholds.sh: FIRE names {run!r}, but {out}/{run}/predictions.jsonl does not exist "
                     f"(runs here: rind, etc{''.join(', ' + r for r in mlp_runs)})")
        rows = [json.loads(l) for l in open(f"{out}/{run}/predictions.jsonl")]
        firsts, kinds = [], {"function word": 0, "punctuation": 0, "content word": 0, "answer": 0}
        wrong = [r["metrics"]["f1"] < 0.5 for r in rows]
        fired = [False] * len(rows)
        for q, r in enumerate(rows):
            trace = r["trace"]
            # the token after which "So the answer is" ends, if the answer has one
            text, answer_start = "", None
            for i, t in enumerate(trace):
                text += t["text"]
                if answer_start is None and text.rstrip().lower().endswith("the answer is"):
                    answer_start = i + 1
            for i, t in enumerate(trace):
                # etc fires at |d2| >= alpha, rind and mlp above their threshold
                if t["score"] is not None and (abs(t["score"]) >= thr if run.startswith("etc") else abs(t["score"]) > thr):
                    firsts.append(i)
                    fired[q] = True
                    kinds[kind(t["text"], i, answer_start)] += 1
                    break
        n = len(firsts)
        med = sorted(firsts)[n // 2] if n else float("nan")
        share = lambda k: f"{kinds[k] / n:.0%}" if n else "-"
        on_wrong = sum(f and w for f, w in zip(fired, wrong))
        on_right = sum(f and not w for f, w in zip(fired, wrong))
        print(f"| {run} | {thr:g} | {n}/{len(rows)} | {on_wrong}/{sum(wrong)} | {on_right}/{len(rows) - sum(wrong)} | {med} | {share('function word')} | {share('punctuation')} | {share('content word')} | {share('answer')} |")
PY
