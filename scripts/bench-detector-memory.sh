#!/usr/bin/env bash
# Peak memory and wall time of `ragtime train detector` against the size of the label store: all rows in memory
# (the default) beside --stream (shard by shard, through a shuffle buffer), one epoch each, on synthetic stores
# of Qwen2.5-Coder-0.5B's hidden width (896) written by ragtime's own store writer
# (scripts/fake_label_store.rs). Prints one Markdown table.
#
#   scripts/bench-detector-memory.sh [ROWS...]      (default: 50000 100000 200000; WORK=dir keeps the stores,
#                                                    HIDDEN=896, BUFFER=16384, EPOCHS=1; EPOCHS=2 separates a
#                                                    GPU's kernel compilation, in the first epoch, from the second)
#
# MODES="stream" leaves out the all-in-memory rows. DEVICES="cpu cuda" trains each store on each device
# (`train detector --device`; default cpu): on a GPU the peak RSS is the host's. BIN and FAKE name prebuilt
# binaries of ragtime and of the store writer (for a machine without a Rust toolchain); otherwise both are built.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=("${@:-50000 100000 200000}")
[[ $# -eq 0 ]] && ROWS=(50000 100000 200000)
HIDDEN=${HIDDEN:-896}
BUFFER=${BUFFER:-16384}
EPOCHS=${EPOCHS:-1}
WORK=${WORK:-$(mktemp -d)}
DEVICES=${DEVICES:-cpu}
MODES=${MODES:-memory stream}
for mode in $MODES; do
  [[ $mode == memory || $mode == stream ]] || { echo "bench-detector-memory: MODES: '$mode': expected memory and/or stream" >&2; exit 2; }
done
if [[ -z ${BIN:-} || -z ${FAKE:-} ]]; then
  cargo build --release -q --bin ragtime --example fake_label_store
  BIN=target/release/ragtime FAKE=target/release/examples/fake_label_store
fi
echo "| rows | store on disk | device | mode | wall s | epoch s (first, last) | peak RSS MiB | test ROC-AUC |"
echo "|---:|---:|---|---|---:|---:|---:|---:|"
for n in "${ROWS[@]}"; do
  store="$WORK/rows-$n"
  [[ -f "$store/_manifest.json" ]] || "$FAKE" "$store" "$n" "$HIDDEN" >/dev/null
  size=$(du -sh "$store" | cut -f1)
  for dev in $DEVICES; do
    for mode in $MODES; do
      out="$WORK/det-$n-$mode-$dev"
      rm -rf "$out"
      flags=()
      [[ $mode == stream ]] && flags=(--stream --shuffle-buffer "$BUFFER")
      cmd=("$BIN" train detector --data "$store" --out "$out" --epochs "$EPOCHS" --device "$dev" "${flags[@]}")
      if [[ -x /usr/bin/time ]]; then
        /usr/bin/time -f "%e %M" -o "$WORK/time" "${cmd[@]}" >"$WORK/stdout" 2>"$WORK/stderr"
        read -r wall kb <"$WORK/time"
      else # no GNU time: wall time only
        t0=$(date +%s.%N)
        "${cmd[@]}" >"$WORK/stdout" 2>"$WORK/stderr"
        wall=$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") kb=""
      fi
      auc=$(awk '$1 == "test" {for (i = 1; i < NF; i++) if ($i == "ROC-AUC") print $(i + 1)}' "$WORK/stdout")
      # the epoch table's last column (on a GPU the first epoch includes compiling the kernels)
      epochs=$(awk -F'|' '$1 ~ /^ *[0-9]+ +[0-9.]+ *$/ {split($5, a, " "); s = s (s ? ", " : "") a[1]} END {print s}' \
        "$WORK/stdout" "$WORK/stderr")
      [[ $epochs == *,* ]] && epochs="${epochs%%,*}, ${epochs##*, }"
      label=$mode
      [[ $mode == stream ]] && label="stream (buffer $BUFFER rows)"
      rss=$([[ -n $kb ]] && awk "BEGIN{printf \"%.0f\", $kb / 1024}" || echo -)
      printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$n" "$size" "$dev" "$label" "$wall" "$epochs" "$rss" "$auc"
    done
  done
done
