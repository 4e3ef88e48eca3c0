#!/usr/bin/env bash
# Aggregate generation speed at several batch sizes, ragtime beside its peers in one run, on the same GGUF weights
# and prompts. Prints one Markdown table per model.
#
#   scripts/bench-generate.sh            # SmolLM2 (and Qwen2.5-Coder-0.5B when set up), B = 1 8 32
#
# Prompts: the first B questions of NQ-open's dev set (../shared/data/qa/nq), each after a short instruction, so
# prompts differ in length as real ones do. Every engine decodes exactly NEW tokens per prompt, greedy.
# - ragtime: `ragtime generate --prompts P --batch B --ignore-eos --stats` (the CPU engine, or DEVICE=cuda): B lanes
#   with continuous batching, every step's internals captured (entropy, last-layer attention, hidden states);
# - transformers: batched `generate` in float32 on the same weights, with internals (`output_attentions`,
#   `output_hidden_states`, eager attention) and without (sdpa) (scripts/bench_generate_peers.py, the
#   sentence-transformers venv of scripts/st_venv.sh plus `gguf`); HF=0 skips it;
# - llama.cpp: llama-cpp-python on the same GGUF, one sequence (its high-level API decodes one), B = 1 only, in
#   ${RAGTIME_CACHE:-~/.cache/ragtime}/llamacpp-venv when present (`pip install llama-cpp-python`, built from
#   source); no internals.
# - DEVICE=cuda: ragtime's batched engine (the default on cuda), beside its reference engine at B = 1 (burn's
#   tensor ops one sequence at a time), and transformers on the same GPU in float32 and bfloat16, with internals
#   (eager) and without (sdpa), the model loaded once (`bench_generate_peers.py hf-cuda`, with PEER_PY, default
#   python3, which needs `gguf`). An untimed ragtime run first compiles the GPU kernels (its time is printed), and
#   each row's timed run follows an untimed one of the same prompts in the same process (`generate --warmup 1`:
#   CubeCL compiles a kernel per shape, and lanes growing into longer key buckets make new ones; `cubecl.toml` with
#   `[compilation] cache = "target"` keeps them on disk between runs).
#   DTYPES="f32 bf16 f16" gives a batched-engine row per `--dtype` (default f32); HF_DTYPES="f32" limits
#   transformers to float32 (default "f32 bf16"); REF_ROW=0 leaves out the reference engine's row. HF_COMPILE=1
#   adds transformers' bfloat16 rows with its static KV cache and `torch.compile` (`hf-cuda --compile`; each shape
#   compiles first, so budget minutes per B), after a check on stderr that the compiled forward with internals
#   gives the eager one's tokens (`bench_generate_peers.py compile-check`).
# - SYNTH="B1 B2 ...": a second table, `synth hallucination` over the first SYNTH_ARTICLES (default 64) articles
#   of wiki/dump_train at each B: labelled examples/s (the run's own progress rate) and wall time with loading;
#   on the CPU a row for the exact products and one for --int8-dot (CPU_INT8) at each B, as in the decoding table.
# - SYNTH_AUTORAG="B1 B2 ...": a third table, `synth autorag` (Algorithm 1, configs/autorag.toml) over the first
#   SYNTH_QUESTIONS (default 64) BioASQ questions of the training pool (qa/bioasq, retrieving from the index
#   SYNTH_INDEX, default indexes/bioasq: `ragtime data corpus bioasq --kinds yes_no,span` then `ragtime index`) at
#   each B: questions/s over the run (wall time with loading) and the kept dialogues. SYNTH_SAMPLES (default 1) is
#   `--samples`; SYNTH_KEEP=PREFIX keeps each run's output folder as PREFIX-MODEL-bB-PRODUCTS.
# transformers reads ragtime's Hugging Face export of the GGUF (`train autorag --export-base`: the same de-quantized
# weights, loaded in seconds); HF_FROM=gguf has it read the GGUF itself (it de-quantizes the file and converts the
# tokenizer in Python: for Qwen2.5-Coder-0.5B that did not finish in the ~100 s a GPU run had left for it).
# DECODE=0 leaves out the decoding table (and its peers), for the synthesis tables alone.
# STATS_LOG=FILE appends each ragtime row's whole `--stats` line (where the time went: the engine's phases,
# scoring, the decode loop) to FILE.
# Threads: all of the machine's (RAYON_NUM_THREADS / torch / llama.cpp defaults); rows say which.
# - CPU: ragtime's exact products and, beside them, `--int8-dot` (inputs quantized to int8, integer products, as
#   llama.cpp computes; CPU_INT8=0 leaves that row out).
# Env: MODELS="smollm2 qwen" (also: qwen1.5b), BATCHES="1 8 32", NEW=32, DEVICE=cpu, BIN=target/release/ragtime.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCHES="${BATCHES:-1 8 32}"
NEW="${NEW:-32}"
DEVICE="${DEVICE:-cpu}"
DTYPES="${DTYPES:-f32}"
HF="${HF:-1}"
DECODE="${DECODE:-1}"
HF_FROM="${HF_FROM:-export}"
[[ $DECODE == 0 || $DECODE == 1 ]] || { echo "bench-generate: DECODE=$DECODE: expected 0 or 1" >&2; exit 2; }
[[ $HF_FROM == export || $HF_FROM == gguf ]] || { echo "bench-generate: HF_FROM=$HF_FROM: expected export or gguf" >&2; exit 2; }
HF_DTYPES="${HF_DTYPES:-f32 bf16}"
CACHE="${RAGTIME_CACHE:-$HOME/.cache/ragtime}"
ST_PY="$CACHE/st-venv/bin/python"
LC_PY="$CACHE/llamacpp-venv/bin/python"
BIN="${BIN:-target/release/ragtime}"
[[ -x $BIN ]] || cargo build --release -q
declare -A GGUF=([smollm2]=checkpoints/smollm2-135m-instruct-q4_1.gguf [qwen]=checkpoints/qwen2.5-coder-0.5b-instruct.gguf
  [qwen1.5b]=checkpoints/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf)
MODELS="${MODELS:-smollm2 qwen}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
max_b=$(tr ' ' '\n' <<<"$BATCHES" | sort -n | tail -1)
python3 scripts/nq_prompts.py "$max_b" "${RAGTIME_DATA:-../shared/data}" >"$WORK/all.jsonl"
threads=$(nproc)
# the synthesis tables' rows per B: on the CPU the exact products and (CPU_INT8=1) --int8-dot, on a GPU f32
synth_variants="f32"
[[ $DEVICE != cpu ]] || synth_variants="exact$([[ ${CPU_INT8:-1} == 1 ]] && echo ' int8' || true)"
synth_flags() { [[ $1 != int8 ]] || echo --int8-dot; }
# seconds since $1 (a `date +%s.%N` reading), one decimal
since() { awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $1}"; }
for m in $MODELS; do
  g="${GGUF[$m]}" batches="$BATCHES"
  [[ -f $g ]] || { echo "bench-generate: $g missing (scripts/setup.sh --model $m); skipped" >&2; continue; }
  # what transformers loads: ragtime's Hugging Face export of the GGUF (the same de-quantized weights; loads in
  # seconds), or with HF_FROM=gguf the GGUF itself (transformers de-quantizes it and converts its tokenizer)
  hf_model="$g"
  if [[ $HF == 1 && $DECODE == 1 && $HF_FROM == export && ($DEVICE != cpu || -x $ST_PY) ]]; then
    hf_model="$WORK/hf-$m"
    $BIN train autorag --model "$g" --export-base "$hf_model" >/dev/null 2>"$WORK/export.log" ||
      { cat "$WORK/export.log" >&2; exit 1; }
  fi
  echo
  echo "### $m ($g), $NEW new tokens per prompt, $DEVICE, $threads threads"
  echo
  [[ $DECODE == 1 ]] || batches=""
  [[ $DECODE == 0 ]] || echo "| engine | B | prompts | generated tok/s | peak RSS MiB |"
  [[ $DECODE == 0 ]] || echo "|---|---:|---:|---:|---:|"
  if [[ $DEVICE != cpu && $DECODE == 1 ]]; then
    for dt in $DTYPES; do
      t0=$(date +%s.%N)
      $BIN generate --model "$g" --device "$DEVICE" --dtype "$dt" --prompts "$WORK/all.jsonl" --batch "$max_b" \
        --max-new-tokens 4 --ignore-eos >/dev/null 2>"$WORK/warm.log" || { cat "$WORK/warm.log" >&2; exit 1; }
      echo "| (untimed warm-up, $dt: kernel compilation + load, $max_b prompts, 4 tokens: $(since "$t0") s) | | | | |"
    done
  fi
  for b in $batches; do
    head -n "$b" "$WORK/all.jsonl" >"$WORK/p.jsonl"
    # one row per --dtype on a GPU; on the CPU the exact products and, with CPU_INT8=1 (default), --int8-dot
    if [[ $DEVICE == cpu ]]; then variants="exact$([[ ${CPU_INT8:-1} == 1 ]] && echo ' int8' || true)"; else variants="$DTYPES"; fi
    for dt in $variants; do
      case $dt in
        exact) flags=(--dtype f32); label="cpu" ;;
        int8) flags=(--dtype f32 --int8-dot); label="cpu --int8-dot" ;;
        *) flags=(--dtype "$dt"); label="batched $dt" ;;
      esac
      # on a GPU, B lanes make kernels of their own shapes, and lanes growing into longer key buckets more: an
      # untimed run of the same prompts in the same process compiles them first
      warm=()
      [[ $DEVICE == cpu ]] || warm=(--warmup 1)
      line=$($BIN generate --model "$g" --device "$DEVICE" "${flags[@]}" --prompts "$WORK/p.jsonl" --batch "$b" \
        --max-new-tokens "$NEW" --ignore-eos "${warm[@]}" --stats 2>&1 >/dev/null | tail -1)
      rate=$(sed -E 's/.*: ([0-9.]+) generated tok\/s.*/\1/' <<<"$line")
      rss=$(sed -E 's/.*peak rss ([0-9]+) MiB.*/\1/' <<<"$line")
      echo "| ragtime $label (internals) | $b | $b | $rate | $rss |"
      [[ -z ${STATS_LOG:-} ]] || echo "$m $DEVICE $dt B=$b: $line" >>"$STATS_LOG"
    done
    if [[ $DEVICE != cpu && $b == 1 && ${REF_ROW:-1} == 1 ]]; then
      # an untimed run first (--warmup 1): the reference engine's shapes grow by step
      line=$($BIN generate --model "$g" --device "$DEVICE" --engine reference --prompts "$WORK/p.jsonl" --batch 1 \
        --max-new-tokens "$NEW" --ignore-eos --warmup 1 --stats 2>&1 >/dev/null | tail -1)
      rate=$(sed -E 's/.*: ([0-9.]+) generated tok\/s.*/\1/' <<<"$line")
      echo "| ragtime reference (internals, one sequence) | 1 | 1 | $rate | - |"
    fi
    if [[ $HF == 1 && $DEVICE == cpu && -x $ST_PY ]]; then
      for mode in --internals ""; do
        line=$("$ST_PY" scripts/bench_generate_peers.py hf "$hf_model" "$WORK/p.jsonl" "$b" "$NEW" $mode 2>/dev/null | tail -1) || line=""
        rate=$(sed -E 's/.*: ([0-9.]+) generated tok\/s.*/\1/' <<<"$line")
        rss=$(sed -E 's/.*peak rss ([0-9]+) MiB.*/\1/' <<<"$line")
        name="transformers f32$([[ -n $mode ]] && echo ' (internals, eager)' || echo ' (sdpa)')"
        echo "| $name | $b | $b | ${rate:-failed} | ${rss:--} |"
      done
    fi
    if [[ $b == 1 && -x $LC_PY ]] && "$LC_PY" -c "import llama_cpp" 2>/dev/null; then
      head -n 8 "$WORK/all.jsonl" >"$WORK/p8.jsonl"
      line=$("$LC_PY" scripts/bench_generate_peers.py llamacpp "$g" "$WORK/p8.jsonl" 1 "$NEW" 2>/dev/null | tail -1) || line=""
      rate=$(sed -E 's/.*: ([0-9.]+) generated tok\/s.*/\1/' <<<"$line")
      rss=$(sed -E 's/.*peak rss ([0-9]+) MiB.*/\1/' <<<"$line")
      echo "| llama.cpp (no internals, one sequence, 8 prompts in turn) | 1 | 8 | ${rate:-failed} | ${rss:--} |"
    fi
  done
  if [[ $HF == 1 && $DEVICE != cpu && $DECODE == 1 ]]; then
    compile_flag=()
    if [[ ${HF_COMPILE:-0} == 1 ]]; then
      compile_flag=(--compile)
      # the compiled forward with internals must give what the eager one gives (on stderr, beside the table)
      "${PEER_PY:-python3}" scripts/bench_generate_peers.py compile-check "$hf_model" cuda 2>"$WORK/compile-check.log" >&2 ||
        echo "compile-check failed: $(tail -1 "$WORK/compile-check.log")" >&2
    fi
    "${PEER_PY:-python3}" scripts/bench_generate_peers.py hf-cuda "$hf_model" "$WORK/all.jsonl" "$BATCHES" "$NEW" "$HF_DTYPES" \
      "${compile_flag[@]}" 2>"$WORK/hf.log" ||
      { echo "| transformers | | | failed: $(tail -1 "$WORK/hf.log") | |"; }
  fi
  if [[ -n ${SYNTH:-} ]]; then
    n="${SYNTH_ARTICLES:-64}"
    echo
    echo "#### synth hallucination, $m, first $n articles of wiki/dump_train, $DEVICE"
    echo
    echo "| B | products | articles | examples | examples/s (progress) | wall s (with loading) |"
    echo "|---:|---|---:|---:|---:|---:|"
    for b in $SYNTH; do
      for v in $synth_variants; do
        rm -rf "$WORK/synth"
        t0=$(date +%s.%N)
        # shellcheck disable=SC2046
        $BIN synth hallucination --model "$g" --device "$DEVICE" $(synth_flags "$v") \
          --wiki "${RAGTIME_DATA:-../shared/data}/wiki/dump_train" --out "$WORK/synth" --limit "$n" --batch "$b" \
          >"$WORK/synth.out" 2>"$WORK/synth.log" || { tail -3 "$WORK/synth.log" >&2; continue; }
        wall=$(since "$t0")
        rate=$(grep -E 'examples/s' "$WORK/synth.log" | tail -1 | sed -E 's/.*, ([0-9.]+) examples\/s.*/\1/')
        ex=$(head -1 "$WORK/synth.out" | sed -E 's/.*: ([0-9]+) articles, ([0-9]+) examples.*/\2/')
        echo "| $b | $v | $n | $ex | $rate | $wall |"
      done
    done
  fi
  if [[ -n ${SYNTH_AUTORAG:-} ]]; then
    n="${SYNTH_QUESTIONS:-64}" idx="${SYNTH_INDEX:-indexes/bioasq}" k="${SYNTH_SAMPLES:-1}"
    echo
    echo "#### synth autorag, $m, first $n BioASQ questions (index $idx), --samples $k, $DEVICE"
    echo
    echo "| B | products | questions | kept | questions/s (wall with loading) | wall s |"
    echo "|---:|---|---:|---:|---:|---:|"
    for b in $SYNTH_AUTORAG; do
      for v in $synth_variants; do
        rm -rf "$WORK/autorag"
        t0=$(date +%s.%N)
        # shellcheck disable=SC2046
        $BIN synth autorag --model "$g" --device "$DEVICE" $(synth_flags "$v") \
          --dataset "${RAGTIME_DATA:-../shared/data}/qa/bioasq" --layout bioasq --index "$idx" --out "$WORK/autorag" \
          --limit "$n" --samples "$k" --batch "$b" >"$WORK/autorag.out" 2>"$WORK/autorag.log" ||
          { tail -3 "$WORK/autorag.log" >&2; continue; }
        wall=$(since "$t0")
        read -r tried kept < <(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["tried"], s["kept"])' \
          "$WORK/autorag/stats.json")
        echo "| $b | $v | $tried | $kept | $(awk "BEGIN{printf \"%.2f\", $tried / $wall}") | $wall |"
        [[ -z ${SYNTH_KEEP:-} ]] || cp -r "$WORK/autorag" "$SYNTH_KEEP-$m-b$b-$v"
      done
    done
  fi
done
