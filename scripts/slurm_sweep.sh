#!/usr/bin/env bash
# scripts/slurm_sweep.sh -- runs a memest-measure sweep on a Slurm cluster as a job array, one
# shard per array task, then merges the shards into one JSONL (docs/slurm.md, "Sweeps").
#
#   scripts/slurm_sweep.sh submit MANIFEST OUTDIR N [--measure PATH] [--only I,J,...]
#                          [--no-merge] [--sbatch "OPTIONS"] [--merge-sbatch "OPTIONS"]
#                          [-- MEMEST_MEASURE_ARGS...]
#   scripts/slurm_sweep.sh merge MANIFEST OUTDIR N [--measure PATH]
#
# submit: one array job, tasks 0..N-1 (or only the listed ones), task I running
#   memest-measure --sweep MANIFEST --shard I/N --out OUTDIR/shard-I-of-N.jsonl ARGS...
# and a merge job that starts when every task has ended (afterany), writing OUTDIR/rows.jsonl.
# --sbatch options go to the array (partition, account, time, --gres for a GPU sweep),
# --merge-sbatch to the merge job (it needs one CPU for seconds). Prints the two job ids. To
# resume after a killed or failed task, run the same submit again (or with --only the tasks that
# did not finish): finished rows are skipped, never run twice.
# merge: the merge step alone, here: memest-measure --merge OUTDIR/shard-*-of-N.jsonl
#   --sweep MANIFEST --out OUTDIR/rows.jsonl (exit 1 and a list when configurations have no row).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n '2,19p' "$0" >&2; exit 2; }
(($# >= 4)) || usage
cmd="$1" manifest="$2" outdir="$3" shards="$4"
shift 4
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || { echo "slurm_sweep.sh: N must be a positive integer, not '$shards'" >&2; exit 2; }
measure="$(command -v memest-measure || true)"
[[ -x "$repo/build/tools/memest-measure" ]] && measure="$repo/build/tools/memest-measure"
only="" merge=1 sbatch_opts="" merge_sbatch_opts=""
measure_args=()
while (($#)); do
  case "$1" in
    --measure) measure="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --no-merge) merge=0; shift ;;
    --sbatch) sbatch_opts="$2"; shift 2 ;;
    --merge-sbatch) merge_sbatch_opts="$2"; shift 2 ;;
    --) shift; measure_args=("$@"); break ;;
    *) echo "slurm_sweep.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ -n "$measure" && -x "$measure" ]] || { echo "slurm_sweep.sh: memest-measure not found (give --measure PATH)" >&2; exit 2; }
[[ -r "$manifest" ]] || { echo "slurm_sweep.sh: cannot read the manifest '$manifest'" >&2; exit 2; }
measure="$(realpath "$measure")"
manifest="$(realpath "$manifest")"
mkdir -p "$outdir"
outdir="$(realpath "$outdir")"

shard_files() {
  local i files=()
  for ((i = 0; i < shards; i++)); do
    [[ -e "$outdir/shard-$i-of-$shards.jsonl" ]] && files+=("$outdir/shard-$i-of-$shards.jsonl")
  done
  printf '%s\n' "${files[@]}"
}

case "$cmd" in
  merge)
    mapfile -t files < <(shard_files)
    ((${#files[@]})) || { echo "slurm_sweep.sh: no shard files in $outdir" >&2; exit 1; }
    exec "$measure" --merge "${files[@]}" --sweep "$manifest" --out "$outdir/rows.jsonl"
    ;;
  submit)
    array="0-$((shards - 1))"
    if [[ -n "$only" ]]; then
      [[ "$only" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "slurm_sweep.sh: --only takes task ids: 1,3" >&2; exit 2; }
      for i in ${only//,/ }; do
        ((i < shards)) || { echo "slurm_sweep.sh: --only $i: tasks are 0..$((shards - 1))" >&2; exit 2; }
      done
      array="$only"
    fi
    # shellcheck disable=SC2086  # --sbatch options are split on purpose
    array_job=$(sbatch --parsable --array="$array" --chdir="$outdir" $sbatch_opts \
      "$repo/slurm/sweep-task.sbatch" "$measure" "$manifest" "$outdir" "$shards" "${measure_args[@]}")
    array_job="${array_job%%;*}"
    echo "array job $array_job: tasks $array of $shards, rows in $outdir/shard-I-of-$shards.jsonl"
    if ((merge)); then
      # shellcheck disable=SC2086
      merge_job=$(sbatch --parsable --dependency="afterany:$array_job" --chdir="$outdir" \
        --job-name=memest-sweep-merge --output="$outdir/merge-%j.out" $merge_sbatch_opts \
        --wrap "bash $(printf '%q' "$repo/scripts/slurm_sweep.sh") merge $(printf '%q' "$manifest") $(printf '%q' "$outdir") $shards --measure $(printf '%q' "$measure")")
      merge_job="${merge_job%%;*}"
      echo "merge job $merge_job (after every task ends): $outdir/rows.jsonl"
    fi
    ;;
  *) usage ;;
esac
