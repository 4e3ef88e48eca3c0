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
