#!/usr/bin/env bash
# MIND's feature ablation for the hallucination detector: `ragtime train detector` on one label dataset with each
# feature set, and the test articles' ROC-AUC, PR-AUC, F1 and ECE side by side (the epoch kept is the one with
# the best validation ROC-AUC; the article split is the detector's own, by hash of the article id).
#
#   scripts/detector-ablation.sh DATA[,DATA...] [OUT]     (OUT: where the checkpoints go; default runs/ablation-<name>)
#
# Feature sets (src/labels, docs/detector.md): the mean over layers at the last prompt token (MIND's
# default), the last layer there, the last layer and the layer mean over the generated entity, single scalars
# (entropies), and the concatenation of the two last-token states.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
data=$1
name=$(basename "${data%%,*}")
out=${2:-runs/ablation-$name}
RAGTIME=${RAGTIME:-target/release/ragtime}
[ -x "$RAGTIME" ] || { echo "detector-ablation.sh: build first (cargo build --release)" >&2; exit 2; }
sets=(
  hidden_mean_last
  hidden_final_last
  hidden_mean_entity
  hidden_final_entity
  hidden_mean_last,hidden_final_last
  hidden_mean_last,entropy_last
  entropy_last,entropy_entity_mean
)
echo "Detector feature ablation on $data (test articles; \`scripts/detector-ablation.sh $*\`)"
echo
echo "| features | train ex. | test ex. | test hallucinated | ROC-AUC | PR-AUC | F1 | ECE | best epoch |"
echo "|---|---|---|---|---|---|---|---|---|"
for f in "${sets[@]}"; do
  dir=$out/${f//,/+}
  log=$("$RAGTIME" train detector --data "$data" --features "$f" --standardize --out "$dir" 2>&1) || {
    echo "| $f | failed: $(echo "$log" | grep -m1 error) |"; continue; }
  train=$(echo "$log" | awk '$1 == "train" {print $5}')
  test_line=$(echo "$log" | awk '$1 == "test"')
  epoch=$(echo "$log" | sed -n 's/^kept epoch \([0-9]*\).*/\1/p')
  echo "$test_line" | awk -v f="$f" -v tr="$train" -v ep="$epoch" \
    '{for (i = 1; i <= NF; i++) v[$i] = $(i + 1); print "| " f " | " tr " | " v["examples"] " | " v["hallucinated"] " | " v["ROC-AUC"] " | " v["PR-AUC"] " | " v["F1"] " | " v["ECE"] " | " ep " |"}'
done
