#!/usr/bin/env bash
# Decode and prefill speed of the burn runtime on the default model (CPU unless DEVICE=cuda).
# Prints a table: prompt tokens, prefill tok/s, decode tok/s. Usage: scripts/bench-decode.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
DEVICE="${DEVICE:-cpu}"
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
cargo build --release -q
BIN=target/release/ragtime
long_prompt="$(python3 -c "import json;print(json.load(open('../shared/reference/smollm2_135m_q4_1.json'))['cases'][2]['prompt'])")"
printf '| prompt | run | prompt tokens | prefill tok/s | decode tok/s |\n|---|---|---|---|---|\n'
for name in short long; do
  if [[ $name == short ]]; then p="Write a long story about a dragon."; chat=--chat; else p="$long_prompt"; chat=; fi
  for r in $(seq "$RUNS"); do
    line=$($BIN generate --model "$MODEL" --device "$DEVICE" $chat --prompt "$p" --max-new-tokens 64 --stats 2>&1 >/dev/null | tail -1)
    # prompt N tokens in Xs (P tok/s); generated M tokens in Ys (D tok/s)
    read -r n pf dc < <(echo "$line" | sed -E 's/prompt ([0-9]+) tokens in [0-9.]+s \(([0-9.]+) tok\/s\); generated [0-9]+ tokens in [0-9.]+s \(([0-9.]+) tok\/s\)/\1 \2 \3/')
    printf '| %s | %s | %s | %s | %s |\n' "$name" "$r" "$n" "$pf" "$dc"
  done
done
