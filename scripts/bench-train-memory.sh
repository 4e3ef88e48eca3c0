#!/usr/bin/env bash
# Peak memory and speed of `ragtime train autorag` with and without gradient checkpointing, side by side, on long
# dialogues (scripts/autorag_smoke_dialogues.py --long: HotpotQA questions with all their context paragraphs,
# ~1,500-2,500 tokens each). Each row is a separate process: its peak resident memory during training (the trainer's
# `peak rss` on its last update's line, before the final checkpoint is written) and over the whole run
# (/usr/bin/time, which includes writing the checkpoint and the export), tokens/s of the updates after the first,
# and the losses, which must agree between the rows.
#
#   scripts/bench-train-memory.sh
#
# Env: BIN (default target/release/ragtime), or BINS="name=path name=path ..." for builds side by side (each row
#      named by its build), MODEL (default the SmolLM2 GGUF), TOKENIZER (its tokenizer.json; set it empty for a
#      GGUF that carries its own, e.g. Qwen's), MAXLEN (2048),
#      BATCH (1), STEPS (3 updates, one micro-batch each), MODES ("plain checkpointed"), EXTRA (more trainer flags,
#      e.g. "--lora 16"), OUT (runs/bench-train-memory).
set -euo pipefail
cd "$(dirname "$0")/.."
BINS="${BINS:-ragtime=${BIN:-target/release/ragtime}}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
TOKENIZER="${TOKENIZER-../shared/data/models/smollm2-135m-instruct/tokenizer.json}"  # empty: the GGUF's own
MAXLEN="${MAXLEN:-2048}" BATCH="${BATCH:-1}" STEPS="${STEPS:-3}" MODES="${MODES:-plain checkpointed}"
OUT="${OUT:-runs/bench-train-memory}"
mkdir -p "$OUT/data"
[[ -s $OUT/data/dialogues.jsonl ]] || python3 scripts/autorag_smoke_dialogues.py "$OUT/data/dialogues.jsonl" --long
read -ra extra <<<"${EXTRA:-}"

rows=()
for named in $BINS; do
  bin_name="${named%%=*}" BIN="${named#*=}"
  [[ -x $BIN ]] || { echo "bench-train-memory: BINS: '$BIN' is not an executable" >&2; exit 2; }
  for mode in $MODES; do
    flags=()
    case "$mode" in
      plain) ;;
      checkpointed) flags=(--gradient-checkpointing) ;;
      *) echo "bench-train-memory: unknown mode '$mode' (plain, checkpointed)" >&2; exit 2 ;;
    esac
    run="$OUT/run-$bin_name-$mode"
    rm -rf "$run"
    log="$OUT/$bin_name-$mode.log"
    /usr/bin/time -f "%M %e" -o "$OUT/$bin_name-$mode.time" "$BIN" train autorag --model "$MODEL" ${TOKENIZER:+--tokenizer "$TOKENIZER"} \
      --data "$OUT/data" --out "$run" --max-len "$MAXLEN" --batch-size "$BATCH" --grad-accum 1 --max-steps "$STEPS" \
      --epochs 1 --valid-fraction 0 --eval-every 1000 --save-every 1000 --lr 5e-5 --warmup-ratio 0 "${extra[@]}" "${flags[@]}" \
      >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
    rm -rf "$run"
    read -r rss_kb secs <"$OUT/$bin_name-$mode.time"
    # step lines: "step 2/3  epoch 1  loss 1.2345  ... 1234 tok (...)  56 tok/s  batches 1x2048  peak rss 3671 MiB"
    field() { grep -E '^step ' "$log" | awk -v k="$1" '{for(i=1;i<NF;i++) if($i==k) print $(i+1)}'; }
    losses=$(field loss | paste -sd' ' -)
    toks=$(grep -E '^step ' "$log" | awk 'NR>1 {for(i=2;i<=NF;i++) if($i=="tok/s") {s+=$(i-1); n++}} END {if(n) printf "%.0f", s/n; else print "-"}')
    shapes=$(field batches | paste -sd, -)
    train_peak=$(field rss | tail -1 | awk '{printf "%.2f", $1/1024}')
    rows+=("| $bin_name | $mode | $shapes | $train_peak | $(awk -v k="$rss_kb" 'BEGIN {printf "%.2f", k/1048576}') | $toks | $secs | $losses |")
  done
done

echo
echo "train autorag, $(basename "$MODEL"), max_len $MAXLEN, batch $BATCH, $STEPS updates, $(nproc) cores ${EXTRA:-}"
echo
echo "| build | backward | batches | peak RSS training (GiB) | peak RSS whole run (GiB) | tokens/s (updates 2+) | wall s | losses |"
echo "|---|---|---|---:|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
