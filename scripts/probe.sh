#!/usr/bin/env bash
# What each bad input gets: runs ragtime on a list of bad inputs and prints a Markdown table of the case, the exit
# code and the first line ragtime wrote to stderr. Exit codes: 0 success, 2 a usage error (the command line must
# change: clap's own, or a request it cannot meet), 1 any other error (a file, model, index or the disk must);
# anything else (a panic's 101, an abort's 134, a signal) is a bug.
#
#   scripts/probe.sh            # uses target/release/ragtime (built if missing) and the default SmolLM2 checkpoint
#   RAGTIME=path/to/ragtime scripts/probe.sh    # another build of the binary
#
# The cases need no data beyond a tiny corpus the script writes; the prompt cases load the default model
# (scripts/setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${RAGTIME:-$(pwd)/target/release/ragtime}"
[[ -n "${RAGTIME:-}" || -x "$BIN" ]] || cargo build --release -q
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

printf 'id\ttext\ttitle\n1\tParis is the capital of France.\tParis\n2\tBerlin is the capital of Germany.\tBerlin\n' >"$WORK/c.tsv"
"$BIN" index --corpus "$WORK/c.tsv" --out "$WORK/idx" >/dev/null 2>&1 || { echo "probe: cannot build the tiny index" >&2; exit 1; }
printf 'Paris\nBerlin\nFrance\n' >"$WORK/queries.txt"
printf '{"id":1,"title":"A","text":"a"}\n{"id":2,"title":"\xff","text":"b"}\n{"id":3,"title":"C","text":"c"}\n' >"$WORK/bad-utf8.jsonl"
printf '[trigger\nname = "rind"\n' >"$WORK/broken.toml"
printf '[trigger]\nname = "rind"\ntheta = 1.0\nthetta = 0.3\n' >"$WORK/typo.toml"
printf '{"query": "Who wrote Hamlet?", "label": "Shakespeare"}\n' >"$WORK/odd.jsonl"
ln -s "$WORK/loop-b.gguf" "$WORK/loop-a.gguf" && ln -s "$WORK/loop-a.gguf" "$WORK/loop-b.gguf"
mkdir -p "$WORK/zero-heads"
printf '{"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 0, "vocab_size": 100}' >"$WORK/zero-heads/config.json"
# a directory of the user's own files, given as an output directory: refused before any work, left as it was
mkdir -p "$WORK/theirs"
printf 'their shard' >"$WORK/theirs/part-00000.parquet"
printf 'notes' >"$WORK/theirs/notes.txt"

echo "| case | exit | first line on stderr |"
echo "|---|---:|---|"
row() { # case, then the command: one run; the first "error:" line on stderr, else its first line
  local name="$1"; shift
  "$@" >/dev/null 2>"$WORK/err"
  local code=$?
  local err
  err=$( (grep -m1 '^error' "$WORK/err" || grep -m1 -v '^[[:space:]]*$' "$WORK/err") | cut -c1-160 | sed 's/|/\\|/g')
  printf '| %s | %s | %s |\n' "$name" "$code" "$err"
}
row "search -k 4294967296" "$BIN" search --index "$WORK/idx" --query Paris -k 4294967296
row "search -k 0" "$BIN" search --index "$WORK/idx" --query Paris -k 0
row "search, missing index" "$BIN" search --index "$WORK/none" --query Paris
row "index --encoder ... --hnsw-m 0" "$BIN" index --corpus "$WORK/c.tsv" --out "$WORK/idx5" --encoder "$WORK/none" --hnsw-m 0
row "embed --batch 0" "$BIN" embed --model "$WORK/none" --input "$WORK/c.tsv" --out "$WORK/e.jsonl" --batch 0
row "index, missing corpus" "$BIN" index --corpus "$WORK/none.tsv" --out "$WORK/idx2"
row "index, a line not UTF-8" "$BIN" index --corpus "$WORK/bad-utf8.jsonl" --out "$WORK/idx3"
row "index, not UTF-8, --skip-bad-lines" "$BIN" index --corpus "$WORK/bad-utf8.jsonl" --out "$WORK/idx4" --skip-bad-lines
row "eval --batch 1000000" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --batch 1000000
row "synth hallucination --batch 0" "$BIN" synth hallucination --wiki "$WORK/none" --out "$WORK/synth" --batch 0
row "eval -k 4294967296" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" -k 4294967296
row "eval --set triger.theta=0.3 (typo)" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --set triger.theta=0.3 --limit 1 --out "$WORK/run1"
row "eval --set trigger.theta=nan" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --set trigger.theta=nan --limit 1 --out "$WORK/run2"
row "eval --config broken.toml" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --config "$WORK/broken.toml" --limit 1 --out "$WORK/run3"
row "eval --split nope" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --split nope --limit 1 --out "$WORK/run4"
row "eval --set trigger.thetta=0.3 (a key no method reads)" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --set trigger.thetta=0.3 --limit 1 --out "$WORK/run8"
row "eval --set trigger.theta=high (a string for a number)" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --set trigger.theta=high --limit 1 --out "$WORK/run9"
row "eval --config (a file with a misspelt key)" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --config "$WORK/typo.toml" --limit 1 --out "$WORK/run10"
row "eval --dataset (a file of unknown layout)" "$BIN" eval --dataset "$WORK/odd.jsonl" --trigger none --limit 1 --out "$WORK/run11"
row "eval --dataset hotpotqa --layout popqa" "$BIN" eval --dataset hotpotqa --layout popqa --trigger none --limit 1 --out "$WORK/run12"
row "train detector --lr nan" "$BIN" train detector --lr nan
row "train detector --hidden-layers 0,0" "$BIN" train detector --hidden-layers 0,0
row "train detector --dropout 1.5" "$BIN" train detector --dropout 1.5
row "train detector --device tpu" "$BIN" train detector --device tpu
# a small label dataset, so that train detector gets as far as its --out (inputs are checked first)
"$BIN" synth hallucination --wiki ../shared/data/wiki/dump_valid --limit 2 --max-entities 1 --out "$WORK/labels" >/dev/null 2>&1 ||
  echo "probe: cannot synthesize the tiny label dataset" >&2
row "train detector --data (missing)" "$BIN" train detector --data "$WORK/none" --out "$WORK/det"
row "train detector --out (a folder of other files)" "$BIN" train detector --data "$WORK/labels" --out "$WORK/theirs"
row "eval --out (a folder of other files)" "$BIN" eval --dataset hotpotqa --trigger none --limit 1 --out "$WORK/theirs"
row "synth hallucination --out (a folder of other files)" "$BIN" synth hallucination --wiki ../shared/data/wiki/dump_train --limit 1 --out "$WORK/theirs"
row "eval --budget -1" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --budget=-1
row "eval --budget 7 (no such calibrated point)" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --budget 7 --calibrated "$WORK/none.toml" --limit 1 --out "$WORK/run5"
row "eval --calibrated broken.toml" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --calibrated "$WORK/broken.toml" --limit 1 --out "$WORK/run6"
row "eval --budget 1 --set trigger.theta=0.3" "$BIN" eval --dataset hotpotqa --trigger rind --index "$WORK/idx" --budget 1 --set trigger.theta=0.3 --limit 1 --out "$WORK/run7"
row "sweep --pick --split test" "$BIN" sweep --dataset hotpotqa --split test --triggers rind --index "$WORK/idx" --pick --out "$WORK/sw1"
row "sweep --triggers autorag" "$BIN" sweep --dataset hotpotqa --triggers autorag --index "$WORK/idx" --out "$WORK/sw2"
row "sweep --set trigger.theta=0.3 (the swept key)" "$BIN" sweep --dataset hotpotqa --triggers rind --index "$WORK/idx" --set trigger.theta=0.3 --out "$WORK/sw3"
row "sweep --budgets 5000" "$BIN" sweep --dataset hotpotqa --triggers rind --index "$WORK/idx" --budgets 5000 --out "$WORK/sw4"
row "sweep --pick --calibrated (a file of the user's)" "$BIN" sweep --dataset hotpotqa --triggers rind --index "$WORK/idx" --pick --calibrated "$WORK/theirs/notes.txt" --out "$WORK/sw5"
row "sweep --out (a folder of other files)" "$BIN" sweep --dataset hotpotqa --triggers none --limit 1 --out "$WORK/theirs"
row "report --baseline nope (no run directory given)" "$BIN" report --baseline nope "$WORK/idx"
row "report --mean-over 1.9..1.2" "$BIN" report --mean-over 1.9..1.2 "$WORK/idx"
row "train autorag --lr nan" "$BIN" train autorag --lr nan
row "generate --top-p 0" "$BIN" generate --prompt hi --top-p 0
row "generate --temperature -1" "$BIN" generate --prompt hi --temperature=-1
row "inspect --prompt ''" "$BIN" inspect --prompt ''
row "generate, config.json with 0 heads" "$BIN" generate --prompt hi --model "$WORK/zero-heads"
row "generate, missing model" "$BIN" generate --prompt hi --model "$WORK/none.gguf"
row "generate, a model path through a file" "$BIN" generate --prompt hi --model "$WORK/c.tsv/model.gguf"
row "generate, a model that is a symbolic-link loop" "$BIN" generate --prompt hi --model "$WORK/loop-a.gguf"
row "search, an index path through a file" "$BIN" search --index "$WORK/c.tsv/idx" --query Paris
row "index --shard 4/4" "$BIN" index --corpus "$WORK/c.tsv" --out "$WORK/sh1" --shard 4/4
row "index --shard 1" "$BIN" index --corpus "$WORK/c.tsv" --out "$WORK/sh1" --shard 1
row "index in a Slurm array numbered from 1 (task 4 of 4)" env SLURM_ARRAY_TASK_ID=4 SLURM_ARRAY_TASK_COUNT=4 "$BIN" index --corpus "$WORK/c.tsv" --out "$WORK/sh2"
row "index --shard 0/2 --out (a folder of other files)" "$BIN" index --corpus "$WORK/c.tsv" --out "$WORK/theirs" --shard 0/2
"$BIN" index --corpus "$WORK/c.tsv" --out "$WORK/sh3" --shard 0/3 -q >/dev/null 2>&1
row "index --shard 1/2 beside shards of 3" "$BIN" index --corpus "$WORK/c.tsv" --out "$WORK/sh3" --shard 1/2
row "index --shard 1/3 --passage-words 50 beside shards of 100" "$BIN" index --corpus "$WORK/c.tsv" --out "$WORK/sh3" --shard 1/3 --passage-words 50
row "merge, shards 1 and 2 of 3 missing" "$BIN" merge "$WORK/sh3"
row "merge, not a sharded output" "$BIN" merge "$WORK/idx"
row "merge, missing directory" "$BIN" merge "$WORK/none"
[[ $(cat "$WORK/theirs/part-00000.parquet") == "their shard" && $(cat "$WORK/theirs/notes.txt") == "notes" && $(ls -A "$WORK/theirs" | wc -l) == 2 ]] ||
  echo "| (the folder of other files was changed!) | - | - |"
# a damaged index: bytes flipped in the middle of each segment file
cp -r "$WORK/idx" "$WORK/idx-bad"
for f in "$WORK"/idx-bad/*.idx "$WORK"/idx-bad/*.store "$WORK"/idx-bad/*.term; do
  [[ -f $f ]] && python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); n=len(b)//2; b[n:n+16]=bytes(x^0xA5 for x in b[n:n+16]); open(p,'wb').write(b)" "$f"
done
row "search, bytes flipped in the segment files" "$BIN" search --index "$WORK/idx-bad" --query Paris
# stdout to a full device: the OS error, exit 1
row "search > /dev/full" bash -c "\"$BIN\" search --index \"$WORK/idx\" --query Paris >/dev/full"
# a closed pipe: quiet (SIGPIPE's default action: 141 in the shell, or 0 when all output fit before head closed)
{ "$BIN" search --index "$WORK/idx" --queries "$WORK/queries.txt" --json 2>"$WORK/pipe.err"; echo $? >"$WORK/pipe.code"; } | head -c 1 >/dev/null
printf '| %s | %s | %s |\n' "search --queries ... \\| head -c 1" "$(cat "$WORK/pipe.code")" "$(grep -m1 -v '^[[:space:]]*$' "$WORK/pipe.err" | cut -c1-160)"
