#!/usr/bin/env bash
# The controller comparison at matched retrieval budgets, for one model and dataset:
#   1. `ragtime sweep` of every controller over its threshold grid on the validation split, with --pick (writes
#      configs/calibrated/<model>.toml);
#   2. `ragtime eval` of each controller on the test split at each budget (its calibrated threshold), and of the
#      references without a threshold (none, single, oracle, fixed-sentence) once;
#   3. `ragtime report --baseline rind`: per budget, F1 and actual retrievals/question with paired-bootstrap 95%
#      intervals of the difference to RIND; an HTML page with the plot, checked in headless Chromium when present.
# Every step resumes. Usage:
#   MODEL=checkpoints/smollm2-135m-instruct-q4_1.gguf DATASET=hotpotqa VALID=40 TEST=100 BUDGETS="1 2" scripts/matched-budgets.sh
# GRIDS="rind=0.1,0.2 mlp=threshold:0.999,..." replaces those controllers' grids (`sweep --grid`): where a
# threshold is useful depends on the model. STEP=N answers the test questions in rounds of N more each, so a job
# stopped between rounds leaves every run at the same count (paired comparisons need the same questions), and a
# rerun resumes. SWEEP=0 skips step 1 (thresholds already calibrated for this model).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-checkpoints/smollm2-135m-instruct-q4_1.gguf}"
DATASET="${DATASET:-hotpotqa}"
VALID="${VALID:-100}"            # validation questions swept
TEST="${TEST:-150}"              # test questions answered
BUDGETS="${BUDGETS:-1 2}"
CONTROLLERS="${CONTROLLERS:-fixed-length flare rind etc}"   # add mlp with DETECTOR=DIR
REFERENCES="${REFERENCES:-none single oracle fixed-sentence}"
BATCH="${BATCH:-8}"
BIN="${BIN:-target/release/ragtime}"
TAG="$(basename "$MODEL" | sed 's/\.[^.]*$//')"
OUT="${OUT:-runs/matched-$DATASET-$TAG}"
DET=()
[[ -n ${DETECTOR:-} ]] && DET=(--detector "$DETECTOR")
GRID=()
for g in ${GRIDS:-}; do GRID+=(--grid "$g"); done
[[ -x $BIN ]] || cargo build --release -q
triggers="$(echo $REFERENCES $CONTROLLERS | tr ' ' ',')"
if [[ ${SWEEP:-1} != 0 ]]; then
  "$BIN" sweep --model "$MODEL" --dataset "$DATASET" --split valid --limit "$VALID" --triggers "$triggers" \
    --batch "$BATCH" --pick "${DET[@]}" "${GRID[@]}" --out "$OUT/sweep-valid"
fi
STEP="${STEP:-$TEST}"
n=0
while ((n < TEST)); do
  n=$((n + STEP > TEST ? TEST : n + STEP))
  echo "matched-budgets: test questions 1-$n"
  for t in $REFERENCES; do
    "$BIN" eval --model "$MODEL" --dataset "$DATASET" --split test --limit "$n" --trigger "$t" --batch "$BATCH" \
      "${DET[@]}" --out "$OUT/test/$t" >/dev/null
  done
  for b in $BUDGETS; do
    for t in $CONTROLLERS; do
      "$BIN" eval --model "$MODEL" --dataset "$DATASET" --split test --limit "$n" --trigger "$t" --budget "$b" \
        --batch "$BATCH" "${DET[@]}" --label "$t" --out "$OUT/test/$t-b$b" >/dev/null
    done
  done
done
"$BIN" report --baseline rind --html "$OUT/test.html" "$OUT"/test/*
if command -v chromium >/dev/null; then scripts/check-report.sh "$OUT/test.html"; fi
