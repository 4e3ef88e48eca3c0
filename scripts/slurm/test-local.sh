#!/usr/bin/env bash
# The shard contract on a real Slurm: a 4-task array of `synth hallucination` (SmolLM2 over a slice of the shared
# wiki dump) and a 4-task array of `index` (the shared BM25 corpus), each followed by its merge job
# (--dependency=afterok), then the same two jobs run by one process; the merged outputs must equal them (the
# dataset's Parquet files and manifest byte for byte, the index's every hit and BM25 score). Prints the sacct
# table and the per-shard throughput the merges report.
#
# Needs a single-node Slurm, which this script does not install or start. On Debian 12, as root:
#   apt-get install slurm-wlm munge slurmdbd mariadb-server
#   scripts/slurm/start-local.sh        # writes /etc/slurm/*.conf, starts munged, mariadb, slurmdbd, slurmctld, slurmd
# and the release binary and the default model: `cargo build --release`, `scripts/setup.sh`.
#
#   scripts/slurm/test-local.sh [WORKDIR]      (default: a new directory under /tmp; RAGTIME=path/to/ragtime)
set -euo pipefail
cd "$(dirname "$0")/../.."
die() { echo "test-local.sh: $*" >&2; exit 2; }
RAGTIME=${RAGTIME:-$PWD/target/release/ragtime}
DATA=${RAGTIME_DATA:-$PWD/../shared/data}
MODEL=${MODEL:-$PWD/checkpoints/smollm2-135m-instruct-q4_1.gguf}
command -v sbatch >/dev/null && sinfo -h >/dev/null 2>&1 || die "no running Slurm here; see the header for how to start one"
[ -x "$RAGTIME" ] || die "$RAGTIME: not built (cargo build --release)"
[ -f "$MODEL" ] || die "$MODEL: missing (scripts/setup.sh)"
[ -d "$DATA/wiki/dump_valid" ] && [ -f "$DATA/corpus/hotpotqa_paragraphs.tsv" ] || die "$DATA: no shared data (set RAGTIME_DATA)"
if [ $# -ge 1 ]; then
  work=$1
  [ ! -e "$work" ] || die "$work exists; give a new directory"
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/ragtime-slurm.XXXXXX")
fi
work=$(cd "$work" && pwd)
export RAGTIME MODEL LOGS="$work/logs"
n=4
synth_args="--limit 24 --max-entities 2 --extra-tokens 8 --flush-every 4 --no-wordnet"
ids() { sed -E 's/^array job ([0-9]+).*merge job ([0-9]+).*/\1 \2/'; }

echo "== submitting to Slurm ($work)"
line=$(OUT=$work/synth WIKI=$DATA/wiki/dump_valid BATCH=2 ARGS="$synth_args" \
  scripts/slurm/submit.sh $n synth-hallucination --cpus-per-task=1 --mem=2G)
echo "$line"
read -r synth_array synth_merge <<< "$(ids <<< "$line")"
line=$(OUT=$work/index CORPUS=$DATA/corpus/hotpotqa_paragraphs.tsv \
  scripts/slurm/submit.sh $n index --cpus-per-task=1 --mem=2G)
echo "$line"
read -r index_array index_merge <<< "$(ids <<< "$line")"
[ -n "${synth_merge:-}" ] && [ -n "${index_merge:-}" ] || die "sbatch refused a job (see above)"
jobs="$synth_array,$synth_merge,$index_array,$index_merge"

echo "== the same jobs in one process (while Slurm works)"
t0=$(date +%s.%N)
"$RAGTIME" synth hallucination --wiki "$DATA/wiki/dump_valid" --model "$MODEL" --out "$work/synth-single" --batch 2 \
  $synth_args > "$work/logs/synth-single.log" 2>&1
t1=$(date +%s.%N)
"$RAGTIME" index --corpus "$DATA/corpus/hotpotqa_paragraphs.tsv" --out "$work/index-single" --threads 1 -q \
  > "$work/logs/index-single.log" 2>&1
t2=$(date +%s.%N)

echo "== waiting for jobs $jobs"
while squeue -h -j "$jobs" 2>/dev/null | grep -q .; do sleep 5; done
sacct -j "$jobs" --format=JobID%-16,JobName%-16,State,Elapsed,ExitCode,NodeList | tee "$work/sacct.txt"

fail=0
echo "== synth hallucination: merged shards vs one process"
for f in _manifest.json synth-config.json $(cd "$work/synth-single" && ls part-*.parquet); do
  if cmp -s "$work/synth/merged/$f" "$work/synth-single/$f"; then echo "  same: $f"; else echo "  DIFFERENT: $f"; fail=1; fi
done
[ "$(ls "$work/synth/merged"/part-*.parquet | wc -l)" = "$(ls "$work/synth-single"/part-*.parquet | wc -l)" ] || { echo "  DIFFERENT number of files"; fail=1; }

echo "== index: merged shards vs one process (every hit, ties ordered by id)"
for q in "Which magazine was started first" "Arthur's Magazine" "first woman to win a Nobel prize" \
         "the director of the film" "river in Scotland"; do
  hits() {
    "$RAGTIME" search --index "$1" -k 5000 --json --query "$q" |
      python3 -c 'import json,sys; h=json.load(sys.stdin); print("\n".join("%.6f %s" % (x["score"], x["id"]) for x in sorted(h, key=lambda x: (-round(x["score"], 6), x["id"]))))'
  }
  if [ "$(hits "$work/index/merged")" = "$(hits "$work/index-single")" ]; then
    echo "  same: $q ($(hits "$work/index-single" | wc -l) hits)"
  else
    echo "  DIFFERENT: $q"; fail=1
  fi
done

echo "== per-shard throughput (from the merge jobs' logs)"
cat "$work/logs"/ragtime-merge-*.log
printf 'one process: synth hallucination %.1f s, index %.1f s\n' "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
[ $fail = 0 ] && echo "PASS: merged outputs equal the one-process outputs ($work)" || { echo "FAIL ($work)"; exit 1; }
