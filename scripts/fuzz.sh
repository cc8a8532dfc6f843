#!/usr/bin/env bash
# scripts/fuzz.sh SECONDS [JOBS] -- fuzz memest's model loading and estimation (docs/robustness.md).
#
#   1. builds the libFuzzer target tests/fuzz/ into build-fuzz/ (clang, ASan+UBSan, no LibTorch);
#   2. makes the seed corpus under build-fuzz/corpus/ (bundled models, generated zoo models when
#      present, a few hundred libonnx test models, tests/data/crashers/, tests/fuzz/findings/);
#   3. replays the known reproducers (tests/data/crashers/*.onnx, tests/fuzz/findings/*) one by one;
#   4. fuzzes for SECONDS with JOBS worker processes (libFuzzer -fork; default 1), going on after a
#      crash, timeout or OOM so that one run collects every finding;
#   5. prints executions, coverage (cov: edges, ft: features), corpus size, findings by kind, and
#      one sanitizer SUMMARY line per finding.
# Artifacts of each run: build-fuzz/artifacts/<UTC time>/ (build-fuzz/artifacts/latest links to
# it): crash-*, timeout-*, oom-*, leak-* reproducers, fuzz.log, replay.log, summary.txt.
# Exit status: 0 nothing found; 1 a finding (a reproducer that still fails, or a new artifact);
# 2 usage or build error.
# Environment: CXX (default clang++; must be clang), MEMEST_FUZZ_MAX_LEN (default 131072 bytes),
# MEMEST_BUILD_JOBS (ninja -j, default 2). Every cmake/ninja call holds /tmp/memest-build.lock.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/fuzz.sh SECONDS [JOBS]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
[[ $1 =~ ^[0-9]+$ && $1 -ge 1 ]] || usage
DURATION=$1
JOBS=${2:-1}
[[ $JOBS =~ ^[0-9]+$ && $JOBS -ge 1 ]] || usage

BUILD=build-fuzz
LOCK=/tmp/memest-build.lock
MAX_LEN=${MEMEST_FUZZ_MAX_LEN:-131072}
FUZZER=$BUILD/tests/fuzz/memest_load_estimate_fuzz
# Per input: 10 s, 2 GiB resident (also the largest single malloc), inputs up to MAX_LEN bytes.
LIMITS=(-timeout=10 -rss_limit_mb=2048 -max_len="$MAX_LEN")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# ---- 1. build ------------------------------------------------------------------------------------
echo "== build ($BUILD)"
flock "$LOCK" cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="${CXX:-clang++}" -DMEMEST_BUILD_FUZZ=ON -DMEMEST_BUILD_TESTS=OFF \
  -DMEMEST_BUILD_BENCH=OFF -DMEMEST_WITH_TORCH=OFF >/dev/null || exit 2
flock "$LOCK" ninja -C "$BUILD" -j"${MEMEST_BUILD_JOBS:-2}" memest_load_estimate_fuzz || exit 2

# ---- 2. seed corpus ------------------------------------------------------------------------------
# Seeds are copied under their SHA-1 (duplicates collapse); the corpus directory persists between
# runs, so inputs found by earlier runs are seeds of the next.
CORPUS=$BUILD/corpus
mkdir -p "$CORPUS"
add_seeds() {  # reads file names on stdin
  local f sum n=0
  while IFS= read -r f; do
    [[ -f $f ]] || continue
    (( $(stat -c %s "$f") <= MAX_LEN )) || continue
    sum=$(sha1sum "$f" | cut -c1-40)
    [[ -e $CORPUS/$sum ]] || { cp "$f" "$CORPUS/$sum"; n=$((n + 1)); }
  done
  echo "$n"
}
echo "== seeds into $CORPUS"
echo "   bundled models:    $(printf "%s\n" datasets/models/*.onnx | add_seeds) new"
# Generated zoo models exist only after memest-zoo ran (datasets/generated/, or a build dir).
echo "   generated models:  $( { find datasets/generated -name '*.onnx' 2>/dev/null | sort | head -n 200
                               find build* -path "$BUILD" -prune -o -name '*.onnx' -print 2>/dev/null \
                                 | sort | head -n 200; } | add_seeds) new"
# Every 3rd libonnx test model (node/, simple/, pytorch-*/ ...): about 350 small graphs over
# most operators.
TESTDATA=/usr/share/libonnx-testdata/data
echo "   libonnx testdata:  $(find "$TESTDATA" -name model.onnx 2>/dev/null | sort | awk 'NR % 3 == 1' \
                            | add_seeds) new"
# Known reproducers: the crash files (tests/data/crashers/ may not exist yet) and this fuzzer's
# own saved findings.
REPRODUCERS=()
for f in tests/data/crashers/*.onnx tests/fuzz/findings/*; do
  [[ -f $f && $f != *.md ]] && REPRODUCERS+=("$f")
done
echo "   reproducers:       $(printf '%s\n' "${REPRODUCERS[@]}" | add_seeds) new"
echo "   corpus size:       $(find "$CORPUS" -type f | wc -l) files"

# ---- 3. replay the known reproducers -------------------------------------------------------------
RUN=$(date -u +%Y%m%dT%H%M%SZ)
ART=$BUILD/artifacts/$RUN
mkdir -p "$ART"
ln -sfn "$RUN" "$BUILD/artifacts/latest"
REPLAY_FAILED=0
: >"$ART/replay.log"
if (( ${#REPRODUCERS[@]} )); then
  echo "== replay of ${#REPRODUCERS[@]} known reproducers"
  for f in "${REPRODUCERS[@]}"; do
    # Running the binary on files executes each once; the outer timeout guards against a hang
    # that libFuzzer's own -timeout would not end.
    rc=0
    timeout 120 "$FUZZER" "${LIMITS[@]}" -artifact_prefix="$ART/replay-" "$f" \
      >"$ART/replay.one" 2>&1 || rc=$?
    { echo "### $f (rc $rc)"; cat "$ART/replay.one"; } >>"$ART/replay.log"
    if (( rc != 0 )); then
      REPLAY_FAILED=$((REPLAY_FAILED + 1))
      what=$(grep -m1 -E '^SUMMARY: |memest-fuzz FINDING|ERROR: libFuzzer' "$ART/replay.one" || echo "rc $rc")
      echo "   FAIL $f: $what"
    fi
  done
  rm -f "$ART/replay.one" "$ART"/replay-*
  echo "   $REPLAY_FAILED of ${#REPRODUCERS[@]} still fail (details: $ART/replay.log)"
fi

# ---- 4. fuzz -------------------------------------------------------------------------------------
echo "== fuzzing for ${DURATION}s with $JOBS job(s); log: $ART/fuzz.log"
rc=0
"$FUZZER" "$CORPUS" "${LIMITS[@]}" -max_total_time="$DURATION" -fork="$JOBS" \
  -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -artifact_prefix="$ART/" \
  -print_final_stats=1 >"$ART/fuzz.log" 2>&1 || rc=$?

# ---- 5. summary ----------------------------------------------------------------------------------
# Fork mode prints "#EXECS: cov: C ft: F corp: N exec/s E oom/timeout/crash: o/t/c time: Ts".
last=$(grep -E '^#[0-9]+: cov: ' "$ART/fuzz.log" | tail -n1 || true)
field() { sed -nE "s#.*$1 ([0-9/]+).*#\1#p" <<<"$last"; }
count() { find "$ART" -maxdepth 1 -name "$1-*" | wc -l; }
FOUND=$(( $(count crash) + $(count timeout) + $(count oom) + $(count leak) ))
# Fork mode's cov/ft count features merged over jobs; one plain pass over the final corpus gives
# the figures a non-fork libFuzzer run reports (INITED cov: edges, ft: features).
inited=$(timeout 600 "$FUZZER" "${LIMITS[@]}" -runs=0 "$CORPUS" 2>&1 | grep -a -m1 'INITED' || true)
{
  echo "run:          $RUN, ${DURATION}s, $JOBS job(s), libFuzzer exit $rc"
  echo "executions:   $(sed -nE 's/^#([0-9]+):.*/\1/p' <<<"$last")"
  echo "coverage:     cov: $(field cov:) ft: $(field ft:) (fork mode, merged over jobs)"
  echo "corpus pass:  $(sed -nE 's/.*(cov: [0-9]+ ft: [0-9]+ corp: [0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$inited")"
  echo "corpus:       $(field corp:) inputs in the fuzzer's view, $(find "$CORPUS" -type f | wc -l) files in $CORPUS"
  echo "exec/s:       $(field exec/s)"
  echo "findings:     $FOUND new (crash $(count crash), timeout $(count timeout), oom $(count oom), leak $(count leak)); $REPLAY_FAILED known reproducers still fail"
} | tee "$ART/summary.txt"
if [[ -z $last ]]; then
  echo "no progress line in the fuzzer log; its tail:" >&2
  tail -n 30 "$ART/fuzz.log" >&2
  exit 2
fi
# What each new artifact is: its sanitizer SUMMARY (or the target's FINDING line) on replay,
# grouped, with a count and one example file. At most 50 artifacts are replayed.
n=0
: >"$ART/kinds.txt"
for f in "$ART"/crash-* "$ART"/timeout-* "$ART"/oom-* "$ART"/leak-*; do
  [[ -f $f ]] || continue
  n=$((n + 1)); (( n <= 50 )) || break
  what=$(timeout 120 "$FUZZER" "${LIMITS[@]}" -artifact_prefix="$ART/again-" "$f" 2>&1 \
           | grep -m1 -E '^SUMMARY: |memest-fuzz FINDING|ERROR: libFuzzer' || echo "(did not fail on replay)")
  printf '%s\t%s\n' "$what" "$(basename "$f")" >>"$ART/kinds.txt"
done
rm -f "$ART"/again-*
sort "$ART/kinds.txt" | awk -F'\t' '{ n[$1]++; if (!($1 in ex)) ex[$1] = $2 }
  END { for (k in n) printf "  %3d x %s (e.g. %s)\n", n[k], k, ex[k] }' | tee -a "$ART/summary.txt"
echo "artifacts:    $ART"
(( FOUND == 0 && REPLAY_FAILED == 0 )) || exit 1
