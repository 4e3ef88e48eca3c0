#!/usr/bin/env bash
# Peak memory and wall time of `ragtime train detector` against the size of the label store: all rows in memory
# (the default) beside --stream (shard by shard, through a shuffle buffer), one epoch each, on synthetic stores
# of Qwen2.5-Coder-0.5B's hidden width (896) written by ragtime's own store writer
# (scripts/fake_label_store.rs). Prints one Markdown table.
#
#   scripts/bench-detector-memory.sh [ROWS...]      (default: 50000 100000 200000; WORK=dir keeps the stores,
#                                                    HIDDEN=896, BUFFER=16384, EPOCHS=1)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=("${@:-50000 100000 200000}")
[[ $# -eq 0 ]] && ROWS=(50000 100000 200000)
HIDDEN=${HIDDEN:-896}
BUFFER=${BUFFER:-16384}
EPOCHS=${EPOCHS:-1}
WORK=${WORK:-$(mktemp -d)}
cargo build --release -q --bin ragtime --example fake_label_store
BIN=target/release/ragtime
echo "| rows | store on disk | mode | wall s | peak RSS MiB | test ROC-AUC |"
echo "|---:|---:|---|---:|---:|---:|"
for n in "${ROWS[@]}"; do
  store="$WORK/rows-$n"
  [[ -f "$store/_manifest.json" ]] || target/release/examples/fake_label_store "$store" "$n" "$HIDDEN" >/dev/null
  size=$(du -sh "$store" | cut -f1)
  for mode in memory stream; do
    out="$WORK/det-$n-$mode"
    rm -rf "$out"
    flags=()
    [[ $mode == stream ]] && flags=(--stream --shuffle-buffer "$BUFFER")
    /usr/bin/time -f "%e %M" -o "$WORK/time" "$BIN" train detector --data "$store" --out "$out" --epochs "$EPOCHS" \
      "${flags[@]}" >"$WORK/stdout" 2>"$WORK/stderr"
    read -r wall kb <"$WORK/time"
    auc=$(awk '$1 == "test" {for (i = 1; i < NF; i++) if ($i == "ROC-AUC") print $(i + 1)}' "$WORK/stdout")
    label=$mode
    [[ $mode == stream ]] && label="stream (buffer $BUFFER rows)"
    printf '| %s | %s | %s | %s | %.0f | %s |\n' "$n" "$size" "$label" "$wall" "$(echo "$kb / 1024" | bc -l)" "$auc"
  done
done
