#!/usr/bin/env bash
# scripts/slurm/submit.sh N TEMPLATE [sbatch flags...]: submits scripts/slurm/TEMPLATE.sbatch as an array of N
# shards (indices 0..N-1) and merge.sbatch to run after all of them succeed. The template's variables (OUT, and
# WIKI/CORPUS/DATASET/MODEL... as its header says) come from the environment:
#
#   OUT=/shared/ragtime/hallucination-qwen WIKI=/shared/wiki/dump_train MODEL=/shared/qwen.gguf \
#     scripts/slurm/submit.sh 64 synth-hallucination --partition=cpu
#
# Prints the two job ids. LOGS=DIR puts the jobs' logs there (default: the templates' names in the current
# directory). Resubmitting failed indices: RAGTIME_SHARD_COUNT=N sbatch --array=3,7 TEMPLATE.sbatch.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,11p' "$0" >&2; exit 2; }
n=$1 template=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$here/$template.sbatch" ] || { echo "submit.sh: no template $here/$template.sbatch" >&2; exit 2; }
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: N must be a positive whole number, not '$n'" >&2; exit 2; }
: "${OUT:?set OUT (the directory all shards write into)}"
export RAGTIME_SHARD_COUNT=$n
logs_a=() logs_m=()
if [ -n "${LOGS:-}" ]; then
  mkdir -p "$LOGS"
  logs_a=(--output="$LOGS/%x-%A_%a.log") logs_m=(--output="$LOGS/%x-%j.log")
fi
array=$(sbatch --parsable --export=ALL --array="0-$((n - 1))" "${logs_a[@]}" "$@" "$here/$template.sbatch")
array=${array%%;*}
merge=$(sbatch --parsable --export=ALL --dependency="afterok:$array" "${logs_m[@]}" "$here/merge.sbatch")
merge=${merge%%;*}
echo "array job $array ($n shards of $template), merge job $merge -> ${MERGED:-$OUT/merged}"
