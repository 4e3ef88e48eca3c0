#!/usr/bin/env bash
# Auto-RAG at scale, from the training pool to the verdict:
#   1. synthesis (Algorithm 1) on the BioASQ 7B-9B pool (yes/no and factoid questions, their snippets as the
#      corpus), sharded, with rejection sampling and up to KEEP distinct dialogues per question; `ragtime merge`
#      once every shard is done; PASSES > 1 runs the pool again with seeds 1, 2, ... (more samples per question,
#      their dialogues beside the first pass's, repeats left out by `train autorag`);
#   2. fine-tunes of the student on the first N dialogues for each N of CURVE (the learning curve; `all` = every
#      dialogue), EPOCHS epochs each;
#   3. Algorithm 2 on the test questions of each dataset of DATASETS (HotpotQA, PubMedQA: never trained on): the
#      base model few-shot and every fine-tune, on the same questions;
#   4. one `ragtime report --baseline "autorag few-shot"` per dataset: F1 (accuracy), retrievals/question and
#      paired-bootstrap intervals, with the token-level controllers' runs on the same test questions beside them
#      (BASELINES_<dataset>: run directories, e.g. scripts/matched-budgets.sh's OUT/test/*); and the queries of
#      TRACE questions, base against the largest fine-tune.
# Every step resumes (synthesis and training from their files, each eval from its predictions); a machine that
# runs only some shards (SHARDS) stops after them, and the run that finds every shard done goes on.
#
#   DEVICE=cuda scripts/autorag-at-scale.sh                 # everything, on a GPU
#   SHARDS="0" scripts/autorag-at-scale.sh                  # one quarter of the synthesis (e.g. on the CPU)
#   DIALOGUES=docs/results/autorag-hotpotqa-qwen-teacher/dialogues.jsonl MODEL=checkpoints/smollm2-135m-instruct-q4_1.gguf \
#     CURVE="2 all" EPOCHS=1 TEST=2 DATASETS=hotpotqa scripts/autorag-at-scale.sh    # the pipeline on given dialogues
#
# Env: MODEL (the student, and the teacher unless TEACHER is set: checkpoints/qwen2.5-coder-0.5b-instruct.gguf,
#      the paper's setting of a model trained on dialogues it could have written), TEACHER (another synthesis
#      model, e.g. checkpoints/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf: about twice the dialogues per question,
#      docs/autorag.md; default MODEL), TOKENIZER (a tokenizer.json for the fine-tunes, when the GGUF
#      should not ship its own vocabulary), DEVICE (cpu), BATCH (lanes of synth and eval; default the
#      device's), SAMPLES (4), KEEP (2), TEMP (reasoning temperature, 0.7), PASSES (1; pass p > 0 writes
#      OUT/dialogues-seed<p> with --seed p), SHARD_COUNT (4), SHARDS (all), LIMIT (first N pool questions),
#      DIALOGUES (dialogues.jsonl files or folders, space-separated: skip step 1), CURVE ("100 300 all"),
#      EPOCHS (5), TRAIN_ARGS (more `train autorag` flags, e.g. "--lora 16" or "--dtype bf16 --static-shapes"),
#      DATASETS ("hotpotqa pubmedqa"), TEST (100 test questions), TRACE (3), OUT (runs/autorag-at-scale),
#      CKPT (checkpoints/autorag-at-scale), BIN (target/release/ragtime), QUANTIZE (e.g. q8_0: every eval with
#      --quantize, so that the f32 fine-tunes decode from integer blocks on the CPU; the GGUF base keeps its own),
#      EVAL_MODEL_SUFFIX (e.g. /adapter: evaluate each fine-tune's LoRA adapter on the base, when only the
#      adapters were brought from the machine that trained them).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-checkpoints/qwen2.5-coder-0.5b-instruct.gguf}"
TEACHER="${TEACHER:-$MODEL}"
DEVICE="${DEVICE:-cpu}"
SAMPLES="${SAMPLES:-4}" KEEP="${KEEP:-2}" TEMP="${TEMP:-0.7}" PASSES="${PASSES:-1}"
SHARD_COUNT="${SHARD_COUNT:-4}"
SHARDS="${SHARDS:-$(seq -s ' ' 0 $((SHARD_COUNT - 1)))}"
CURVE="${CURVE:-100 300 all}" EPOCHS="${EPOCHS:-5}"
DATASETS="${DATASETS:-hotpotqa pubmedqa}" TEST="${TEST:-100}" TRACE="${TRACE:-3}"
OUT="${OUT:-runs/autorag-at-scale}" CKPT="${CKPT:-checkpoints/autorag-at-scale}"
BIN="${BIN:-target/release/ragtime}"
SHARED=../shared/data
[[ -x $BIN ]] || cargo build --release -q
for n in $CURVE; do
  [[ $n == all || $n =~ ^[1-9][0-9]*$ ]] || { echo "CURVE: '$n' is neither a dialogue count nor 'all'" >&2; exit 2; }
done
[[ $PASSES =~ ^[1-9][0-9]*$ ]] || { echo "PASSES: '$PASSES' is not a positive number of synthesis passes" >&2; exit 2; }
dev=(--device "$DEVICE")
lanes=()
[[ -n ${BATCH:-} ]] && lanes=(--batch "$BATCH")
int8=()
[[ $DEVICE == cpu ]] && int8=(--int8-dot)
mkdir -p "$OUT"

# 1. synthesis
if [[ -n ${DIALOGUES:-} ]]; then
  read -r -a data <<<"$DIALOGUES"
else
  if [[ ! -f indexes/bioasq/ragtime-index.json ]]; then
    mkdir -p runs/bioasq
    "$BIN" data corpus bioasq --kinds yes_no,span --out runs/bioasq/corpus.jsonl
    "$BIN" index --corpus runs/bioasq/corpus.jsonl --out indexes/bioasq
  fi
  limit=()
  [[ -n ${LIMIT:-} ]] && limit=(--limit "$LIMIT")
  data=()
  for ((p = 0; p < PASSES; p++)); do
    dir="$OUT/dialogues" tag=""
    ((p > 0)) && dir="$OUT/dialogues-seed$p" tag="-seed$p"
    for i in $SHARDS; do
      echo "autorag-at-scale: synthesis, pass $((p + 1))/$PASSES, shard $i/$SHARD_COUNT"
      if ! "$BIN" synth autorag --model "$TEACHER" "${dev[@]}" "${int8[@]}" "${lanes[@]}" --dataset "$SHARED/qa/bioasq" \
        --layout bioasq --index indexes/bioasq --out "$dir" --shard "$i/$SHARD_COUNT" "${limit[@]}" \
        --samples "$SAMPLES" --keep "$KEEP" --seed "$p" --set "synth.reasoning_temperature=$TEMP" \
        >"$OUT/synth$tag-$i.json" 2>>"$OUT/synth$tag-$i.log"; then
        tail -1 "$OUT/synth$tag-$i.log" >&2
        exit 1
      fi
      tail -1 "$OUT/synth$tag-$i.log"
    done
    data+=("$dir/merged")
  done
  for dir in "${data[@]%/merged}"; do
    if ! "$BIN" merge --check -q "$dir" >/dev/null 2>"$OUT/merge-check.log"; then
      echo "autorag-at-scale: synthesis not complete ($dir), stopping here:" >&2
      cat "$OUT/merge-check.log" >&2
      exit 0
    fi
    "$BIN" merge -q "$dir"
  done
fi

# 2. the learning curve's fine-tunes
tok=()
[[ -n ${TOKENIZER:-} ]] && tok=(--tokenizer "$TOKENIZER")
for n in $CURVE; do
  limit=()
  [[ $n != all ]] && limit=(--limit "$n")
  # done when the merged model or (a LoRA fine-tune brought back without it) its adapter is there
  if [[ ! -f $CKPT-$n/model.safetensors && ! -f $CKPT-$n/adapter/adapter_model.safetensors ]]; then
    echo "autorag-at-scale: fine-tune on $n dialogues -> $CKPT-$n"
    # shellcheck disable=SC2086
    if ! "$BIN" train autorag "${data[@]/#/--data=}" "${limit[@]}" --model "$MODEL" "${tok[@]}" --out "$CKPT-$n" \
      --epochs "$EPOCHS" "${dev[@]}" ${TRAIN_ARGS:-} >"$OUT/train-$n.log" 2>&1; then
      tail -3 "$OUT/train-$n.log" >&2
      exit 1
    fi
  fi
  tail -1 "$OUT/train-$n.log" 2>/dev/null || true
done

# 3. Algorithm 2 on the test questions, 4. the reports
for ds in $DATASETS; do
  if [[ $ds == pubmedqa && ! -f indexes/pubmedqa/ragtime-index.json ]]; then
    mkdir -p runs/pubmedqa
    python3 scripts/pubmedqa_corpus.py "$SHARED/qa/pubmedqa/pqal_dev_500.json" >runs/pubmedqa/corpus.jsonl
    "$BIN" index --corpus runs/pubmedqa/corpus.jsonl --out indexes/pubmedqa
  elif [[ $ds == hotpotqa && ! -f indexes/hotpotqa/ragtime-index.json ]]; then
    "$BIN" index --corpus "$SHARED/corpus/hotpotqa_paragraphs.tsv" --out indexes/hotpotqa
  fi
  ev=("$BIN" eval --dataset "$ds" --split test --limit "$TEST" --trigger autorag "${dev[@]}" "${lanes[@]}"
    ${QUANTIZE:+--quantize "$QUANTIZE"})
  echo "autorag-at-scale: $ds, $TEST test questions"
  "${ev[@]}" --model "$MODEL" --label "autorag few-shot" --out "$OUT/eval-$ds/autorag-fewshot" >/dev/null
  runs=("$OUT/eval-$ds/autorag-fewshot")
  for n in $CURVE; do
    "${ev[@]}" --model "$CKPT-$n${EVAL_MODEL_SUFFIX:-}" --set autorag.fewshot=false --label "autorag fine-tuned $n" \
      --out "$OUT/eval-$ds/autorag-ft-$n" >/dev/null
    runs+=("$OUT/eval-$ds/autorag-ft-$n")
  done
  var="BASELINES_$ds"
  # shellcheck disable=SC2206
  others=(${!var:-})
  "$BIN" report --baseline "autorag few-shot" "${runs[@]}" "${others[@]}" | tee "$OUT/report-$ds.md"
  last="${runs[${#runs[@]} - 1]}"
  python3 - "$OUT/eval-$ds/autorag-fewshot/predictions.jsonl" "$last/predictions.jsonl" "$TRACE" <<'EOF' |
import json, sys
base, tuned, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = lambda p: {r["id"]: r for r in map(json.loads, open(p))}
b, t = rows(base), rows(tuned)
print(f"\n### Traced questions: few-shot ({base}) against fine-tuned ({tuned})\n")
for qid in [i for i in b if i in t][:n]:
    print(f"- {b[qid]['question']} (gold: {' / '.join(b[qid]['gold'])})")
    for name, r in (("few-shot", b[qid]), ("fine-tuned", t[qid])):
        queries = [x["query"] for x in r["retrievals"]]
        distinct = list(dict.fromkeys(queries))  # in order, each once, with its count
        shown = "; ".join(f"{q[:80]!r}" + (f" x{queries.count(q)}" if queries.count(q) > 1 else "") for q in distinct)
        m = r["metrics"]
        print(f"  - {name}: {len(queries)} retrievals [{shown or 'none'}] -> {r['prediction'][:80]!r} "
              f"(EM {m['em']:.2f}, F1 {m['f1']:.2f})")
EOF
    tee -a "$OUT/report-$ds.md"
done
