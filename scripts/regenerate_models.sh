# scripts/regenerate_models.sh -- sourced, not run: remakes the generated models (datasets/generated/,
# not committed) that measured rows or a sweep manifest name, each folder with the seeds its rows
# were measured on. scripts/accuracy.sh and scripts/gpu_measure.sh both call it, so the folders
# and their memest-zoo commands are listed once.
#
#   regenerate_models ZOO MISSING   # ZOO: the memest-zoo binary; MISSING: missing paths, a line each

regenerate_models() {
  local zoo="$1" missing="$2"
  # (grep reads the whole list: `grep -q` would stop early, and under pipefail the writer's SIGPIPE
  # would turn a match into "no match".)
  if grep -c '^datasets/generated/tiny/' <<<"$missing" >/dev/null; then
    echo "regenerating datasets/generated/tiny (memest-zoo, seed 1)" >&2
    "$zoo" --family all --scale tiny --count 6 --seed 1 --out datasets/generated/tiny >&2
  fi
  if grep -c '^datasets/generated/zoo/' <<<"$missing" >/dev/null; then
    echo "regenerating datasets/generated/zoo (memest-zoo, seed 1)" >&2
    "$zoo" --family all --scale full --count 40 --seed 1 --out datasets/generated/zoo >&2
  fi
  if grep -c '^datasets/generated/gpumemnet/' <<<"$missing" >/dev/null; then
    echo "regenerating datasets/generated/gpumemnet (memest-zoo gpumemnet)" >&2
    "$zoo" gpumemnet --out datasets/generated/gpumemnet/rows.jsonl \
      --write-models datasets/generated/gpumemnet >&2
  fi
}
