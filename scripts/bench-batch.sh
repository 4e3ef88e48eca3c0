#!/usr/bin/env bash
# What answering several questions at once (`ragtime eval --batch B`) gains: the same controller on the first N
# shared HotpotQA questions with each batch size. Predictions must be identical to --batch 1 (the lanes share
# only weight products whose per-row arithmetic is unchanged); the table shows seconds per question (the decode
# loop's wall time over questions, model loading excluded), forward tokens per question (each lane encodes the
# few-shot prefix once, so short runs pay it B times), questions per forward pass, and peak memory.
# Usage: scripts/bench-batch.sh [N questions] (default 12). MODEL=... TRIGGER=rind BATCHES="1 2 4" (a size may
#        repeat, "8 32 8 32", each run in a folder of its own),
#        THREADS=1 (rayon threads) INDEX=indexes/hotpotqa, SET="trigger.theta=0.35" (a --set for the method),
#        FLAGS="--int8-dot" (more flags for every run)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-12}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
TRIGGER="${TRIGGER:-rind}"
BATCHES="${BATCHES:-1 2 4}"
THREADS="${THREADS:-1}"
INDEX="${INDEX:-indexes/hotpotqa}"
SET="${SET:-trigger.theta=0.35}"
BIN="${BIN:-target/release/ragtime}"
[[ -x $BIN ]] || cargo build --release -q
[[ -f $INDEX/ragtime-index.json ]] || $BIN index --corpus ../shared/data/corpus/hotpotqa_paragraphs.tsv --out "$INDEX"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
set_args=()
[[ $TRIGGER == rind && -n $SET ]] && set_args=(--set "$SET")
i=0
for b in $BATCHES; do
  r="$OUT/$i"  # the run's own folder: eval resumes from --out, so a repeated size must not share one
  i=$((i + 1))
  # shellcheck disable=SC2086
  RAYON_NUM_THREADS=$THREADS /usr/bin/time -v -o "$r.time" $BIN eval --dataset hotpotqa --trigger "$TRIGGER" \
    --index "$INDEX" --limit "$N" --model "$MODEL" "${set_args[@]}" ${FLAGS:-} --batch "$b" --out "$r" >/dev/null 2>"$r.log"
done
python3 - "$OUT" "$MODEL" "$TRIGGER" "$THREADS" "${FLAGS:-}" $BATCHES <<'PY'
import json, sys, re
out, model, trigger, threads, flags, batches = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
rows, base = [], None
for i, b in enumerate(batches):
    preds = {p["id"]: p for p in map(json.loads, open(f"{out}/{i}/predictions.jsonl"))}
    t = open(f"{out}/{i}.time").read()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) / 1024
    m = re.search(r"(\d+) forward passes, ([\d.]+) questions per pass", open(f"{out}/{i}.log").read())
    per_pass = float(m.group(2)) if m else 1.0
    n = len(preds)
    sec = sum(p["seconds"] for p in preds.values()) / n
    fwd = sum(p["forward_tokens"] for p in preds.values()) / n
    raw = {i: p["raw_output"] for i, p in preds.items()}
    base = base or raw
    rows.append((b, n, sec, fwd, per_pass, rss, raw == base))
print(f"model {model}, trigger {trigger}, {threads} rayon thread(s){', ' + flags if flags else ''}\n")
print(f"| batch | questions | s/question | forward tokens/q | questions per forward pass | peak RSS MiB | same outputs as batch {batches[0]} |")
print("|---|---|---|---|---|---|---|")
for b, n, sec, fwd, pp, rss, same in rows:
    print(f"| {b} | {n} | {sec:.2f} | {fwd:.0f} | {pp:.2f} | {rss:.0f} | {same} |")
s1 = rows[0][2]
print("\n" + ", ".join(f"batch {b}: {s1 / sec:.2f}x" for b, _, sec, *_ in rows[1:]) + f" against the first run (batch {rows[0][0]})")
PY
