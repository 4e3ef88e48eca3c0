#!/usr/bin/env bash
# Auto-RAG on the CPU, from kept dialogues to one report: fine-tune SmolLM2 on Auto-RAG dialogues, then answer
# questions the synthesis never saw with Auto-RAG's Algorithm 2 (base model few-shot, and the fine-tuned model)
# and with rind, and print one `ragtime report`.
#
#   scripts/autorag-cpu-e2e.sh [DIALOGUES]   # default: the 5 kept Qwen-teacher dialogues
#                                            # (docs/results/autorag-hotpotqa-qwen-teacher/dialogues.jsonl)
#
# Env: SKIP (40: the questions synthesis used), LIMIT (30), OUT (runs/autorag-e2e), CKPT (checkpoints/autorag-e2e),
#      BIN (target/release/ragtime). Every step resumes: the fine-tune from its checkpoint, each eval run from its
#      predictions. The two evals that take longest run side by side (one rayon thread each).
set -euo pipefail
cd "$(dirname "$0")/.."
DIALOGUES="${1:-docs/results/autorag-hotpotqa-qwen-teacher/dialogues.jsonl}"
SKIP="${SKIP:-40}" LIMIT="${LIMIT:-30}"
OUT="${OUT:-runs/autorag-e2e}" CKPT="${CKPT:-checkpoints/autorag-e2e}"
BIN="${BIN:-target/release/ragtime}"
SMOL=checkpoints/smollm2-135m-instruct-q4_1.gguf
TOK=../shared/data/models/smollm2-135m-instruct/tokenizer.json
INDEX=indexes/hotpotqa
[[ -x $BIN ]] || cargo build --release -q
[[ -f $INDEX/ragtime-index.json ]] || $BIN index --corpus ../shared/data/corpus/hotpotqa_paragraphs.tsv --out "$INDEX"
mkdir -p "$OUT"

# 1. Fine-tune (5 epochs, one dialogue per update, lr 2e-5, validation every update).
[[ -f $CKPT/model.safetensors ]] || RAYON_NUM_THREADS=2 $BIN train autorag --data "$DIALOGUES" --model $SMOL --tokenizer $TOK \
  --out "$CKPT" --epochs 5 --grad-accum 1 --lr 2e-5 --valid-fraction 0.2 --eval-every 1 >"$OUT/train.log" 2>&1
tail -3 "$OUT/train.log"

# 2. Three runs on the same questions.
common=(--dataset hotpotqa --index "$INDEX" --skip "$SKIP" --limit "$LIMIT")
RAYON_NUM_THREADS=1 $BIN eval "${common[@]}" --trigger autorag --model "$CKPT" --set autorag.fewshot=false \
  --label "autorag fine-tuned" --out "$OUT/autorag-ft" >"$OUT/autorag-ft.log" 2>&1 &
ft=$!
RAYON_NUM_THREADS=1 $BIN eval "${common[@]}" --trigger autorag --model $SMOL --label "autorag base few-shot" \
  --out "$OUT/autorag-base" >"$OUT/autorag-base.log" 2>&1
RAYON_NUM_THREADS=1 $BIN eval "${common[@]}" --trigger rind --model $SMOL --set trigger.theta=0.35 \
  --label "rind theta=0.35" --out "$OUT/rind" >"$OUT/rind.log" 2>&1
wait $ft
$BIN report "$OUT/autorag-base" "$OUT/autorag-ft" "$OUT/rind"
