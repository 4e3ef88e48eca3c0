#!/usr/bin/env bash
# What padding costs `ragtime train autorag`, and what packing saves: the same updates with one dialogue per row
# and with packed rows (`--pack`), tight and at fixed shapes (`--static-shapes`), side by side. Each row is a
# separate process on the same plan; per row: the micro-batch shapes, the real tokens, the cells computed (rows x
# length summed over the micro-batches), the share of them that is padding, real tokens/s (all updates, and the
# updates after the first, which on CUDA compiles the kernels), and the losses, which must agree between the rows.
#
#   scripts/bench-train-pack.sh
#
# Env: BIN (default target/release/ragtime), DEVICE (cpu), MODEL (default the SmolLM2 GGUF), TOKENIZER (its
#      tokenizer.json; set it empty for a GGUF that carries its own, e.g. Qwen's), DATA (dialogues folder, default
#      the template smoke dialogues of scripts/autorag_smoke_dialogues.py), MAXLEN (1024), BATCH (8), ACCUM (2),
#      STEPS (2 updates), MODES ("tight packed static static-packed"), EXTRA (more trainer flags, e.g. "--dtype
#      bf16"), OUT (runs/bench-train-pack).
#      PLAN_EPOCHS=N: instead of training, the padding of every update of an N-epoch run, from each mode's plan
#      (`--dump-plan`; shapes as the trainer makes them: rows and lengths to powers of two when static, rows at most
#      BATCH).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-target/release/ragtime}"
DEVICE="${DEVICE:-cpu}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
TOKENIZER="${TOKENIZER-../shared/data/models/smollm2-135m-instruct/tokenizer.json}"  # empty: the GGUF's own
DATA="${DATA:-datasets/autorag/smoke}"
MAXLEN="${MAXLEN:-1024}" BATCH="${BATCH:-8}" ACCUM="${ACCUM:-2}" STEPS="${STEPS:-2}"
MODES="${MODES:-tight packed static static-packed}"
OUT="${OUT:-runs/bench-train-pack}"
[[ -x $BIN ]] || { echo "bench-train-pack: BIN: '$BIN' is not an executable" >&2; exit 2; }
if [[ ! -s $DATA/dialogues.jsonl ]]; then
  [[ $DATA == datasets/autorag/smoke ]] || { echo "bench-train-pack: DATA: no $DATA/dialogues.jsonl" >&2; exit 2; }
  python3 scripts/autorag_smoke_dialogues.py
fi
read -ra extra <<<"${EXTRA:-}"
mkdir -p "$OUT"

if [[ -n ${PLAN_EPOCHS:-} ]]; then
  [[ $PLAN_EPOCHS =~ ^[1-9][0-9]*$ ]] || { echo "bench-train-pack: PLAN_EPOCHS=$PLAN_EPOCHS: expected a positive count" >&2; exit 2; }
  echo
  echo "train autorag plans, $(basename "$MODEL"), $DATA, max_len $MAXLEN, batch $BATCH x accum $ACCUM, $PLAN_EPOCHS epochs"
  echo
  echo "| mode | updates | micro-batches | distinct shapes | real tokens | cells computed | padding |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  for mode in $MODES; do
    case "$mode" in
      tight | static) flags=() ;;
      packed | static-packed) flags=(--pack) ;;
      *) echo "bench-train-pack: unknown mode '$mode' (tight, packed, static, static-packed)" >&2; exit 2 ;;
    esac
    plan="$OUT/$mode.plan.jsonl"
    "$BIN" train autorag --model "$MODEL" ${TOKENIZER:+--tokenizer "$TOKENIZER"} --data "$DATA" --max-len "$MAXLEN" \
      --batch-size "$BATCH" --grad-accum "$ACCUM" --epochs "$PLAN_EPOCHS" --valid-fraction 0 "${extra[@]}" \
      "${flags[@]}" --dump-plan "$plan" >"$OUT/$mode.plan.log" 2>&1 || { tail -5 "$OUT/$mode.plan.log"; exit 1; }
    python3 - "$mode" "$plan" "$BATCH" "$MAXLEN" <<'PY'
import json, sys
mode, path, batch, max_len = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
length, updates = {}, []
for line in open(path):
    r = json.loads(line)
    if r.get("kind") == "example" and r["split"] == "train":
        length[r["index"]] = len(r["ids"])
    elif r.get("kind") == "update":
        updates.append(r)
def bucket(n, cap):  # sft::data::bucket: a power of two, at least 64, at most cap unless n is larger
    return max(min(1 << (max(n, 64) - 1).bit_length(), cap), n)
real = cells = micro = 0
shapes = set()
for u in updates:
    # each micro-batch as rows of dialogues: one per row, or the plan's packed rows
    for rows in (u["rows"] if "rows" in u else [[[i] for i in m] for m in u["micro"]]):
        b, t = len(rows), max(sum(length[i] for i in row) for row in rows)
        if mode.startswith("static"):  # sft::data::Batch::padded
            b, t = max(b, min(batch, 1 << (b - 1).bit_length())), bucket(t, max_len)
        real += sum(length[i] for row in rows for i in row)
        cells += b * t
        micro += 1
        shapes.add((b, t))
print(f"| {mode} | {len(updates)} | {micro} | {len(shapes)} | {real} | {cells} | {100 * (1 - real / cells):.1f}% |")
PY
  done
  exit 0
fi

rows=()
for mode in $MODES; do
  case "$mode" in
    tight) flags=() ;;
    packed) flags=(--pack) ;;
    static) flags=(--static-shapes) ;;
    static-packed) flags=(--static-shapes --pack) ;;
    *) echo "bench-train-pack: unknown mode '$mode' (tight, packed, static, static-packed)" >&2; exit 2 ;;
  esac
  run="$OUT/run-$mode"
  [[ ! -e $run || -e $run/.bench-train-pack ]] || { echo "bench-train-pack: $run exists and is not this script's" >&2; exit 2; }
  rm -rf "$run"
  mkdir -p "$run" && touch "$run/.bench-train-pack"
  log="$OUT/$mode.log"
  "$BIN" train autorag --model "$MODEL" ${TOKENIZER:+--tokenizer "$TOKENIZER"} --device "$DEVICE" \
    --data "$DATA" --out "$run/out" --max-len "$MAXLEN" --batch-size "$BATCH" --grad-accum "$ACCUM" \
    --max-steps "$STEPS" --epochs 1 --valid-fraction 0 --eval-every 1000 --save-every 1000 --lr 5e-5 \
    "${extra[@]}" "${flags[@]}" >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
  # the updates from the run's report (tokens, seconds, losses), the shapes from its progress lines
  # ("step 2/3 ... batches 8x512,8x256  peak rss ..")
  rows+=("$(python3 - "$mode" "$run/out/train_report.json" "$log" <<'PY'
import json, sys
mode, report, log = sys.argv[1:]
hist = json.load(open(report))["history"]
shapes = [l.split("batches ")[1].split()[0] for l in open(log) if l.startswith("step ") and "batches " in l]
real = sum(h["tokens"] for h in hist)
cells = sum(int(b) * int(t) for s in shapes for b, t in (x.split("x") for x in s.split(",")))
later = hist[1:]
rate_later = f"{sum(h['tokens'] for h in later) / sum(h['secs'] for h in later):.0f}" if later else "-"
print(f"| {mode} | {' '.join(shapes)} | {real} | {cells} | {100 * (1 - real / cells):.1f}% | "
      f"{real / sum(h['secs'] for h in hist):.0f} | {rate_later} | {' '.join('%.4f' % h['loss'] for h in hist)} |")
PY
)")
  rm -rf "$run"
done

echo
echo "train autorag, $(basename "$MODEL"), $DEVICE, max_len $MAXLEN, batch $BATCH x accum $ACCUM, $STEPS updates, $(nproc) cores ${EXTRA:-}"
echo
echo "| mode | micro-batches per update | real tokens | cells computed | padding | real tokens/s | tokens/s (updates 2+) | losses |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
