#!/usr/bin/env bash
# tests/slurm/run.sh admission|sweep MEMEST MEMEST_MEASURE SOURCE_DIR -- memest on a real Slurm.
#
# Starts a single-node Slurm on localhost (tests/slurm/cluster.sh: Debian's slurmctld, slurmd and
# munge, fake GPUs gpu:a100:2, gpu:l4:2, gpu:1g.5gb:2), then
#   admission: installs memest's cli_filter (slurm/install.sh) and submits jobs with sbatch: ones
#              that fit, do not fit (reject, warn, upgrade), declare no model, declare a model
#              that cannot be read, and ones whose memest hangs or crashes; checks each decision
#              and what the user sees.
#   sweep:     runs a CPU sweep as a job array (scripts/slurm_sweep.sh, 3 shards), cancels one
#              task mid-way, resumes it, merges, and checks the merged rows: every configuration
#              exactly once, the rows written before the kill kept byte for byte, provenance.
# Exit 0 when every check passes, 1 when one fails, 77 (ctest: skipped) when Slurm cannot start
# here, with the reason on a line "SLURM TEST SKIPPED: ...". The daemons are stopped on every
# exit (MEMEST_SLURM_KEEP=1 keeps the folder for a look).
set -uo pipefail
MODE=${1:?admission or sweep}
MEMEST=${2:?memest binary}
MEASURE=${3:-}
SRC=$(cd "${4:?source dir}" && pwd)
HERE="$SRC/tests/slurm"
START=$(date +%s.%N)

cluster_unavailable() {
  echo "SLURM TEST SKIPPED: Slurm cannot start here: $*"
  exit 77
}
# shellcheck source=tests/slurm/cluster.sh
source "$HERE/cluster.sh"
trap stop_cluster EXIT

FAILED=0
CHECKS=0
ok() { CHECKS=$((CHECKS + 1)); echo "ok   $*"; }
fail() { CHECKS=$((CHECKS + 1)); FAILED=$((FAILED + 1)); echo "FAIL $*"; }
check() {  # check NAME COMMAND...: ok when the command succeeds
  local name=$1
  shift
  if "$@"; then ok "$name"; else fail "$name"; fi
}
elapsed() { python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(date +%s.%N)"; }
contains() { grep -qF -- "$2" "$1"; }

[[ -x "$MEMEST" ]] || { echo "FAIL memest not built at $MEMEST"; exit 1; }
if [[ "$MODE" == sweep && ( -z "$MEASURE" || ! -x "$MEASURE" ) ]]; then
  echo "SLURM TEST SKIPPED: memest-measure is not built (LibTorch not found: scripts/deps.sh installs libtorch-dev), so there is no sweep to run"
  exit 77
fi

start_cluster

# memest's cli_filter, installed as an admin would (slurm/install.sh), in both modes: a sweep's
# jobs declare no model and must pass it untouched.
conf="$T/etc/memest/admission.conf"
bash "$SRC/slurm/install.sh" --memest "$MEMEST" --bin-dir "$T/bin" --slurm-conf-dir "$T/etc" \
  --config "$conf" --helper-timeout 7 > "$T/install.log" 2>&1
rc=$?
sed 's/^/     | /' "$T/install.log"
check "install.sh installs the helper and cli_filter.lua, and --check-config accepts the example table (rc $rc)" \
  test $rc -eq 0 -a -x "$T/bin/memest-admit" -a -f "$T/etc/cli_filter.lua"
check "install.sh filled in the helper's path" contains "$T/etc/cli_filter.lua" "\"$T/bin/memest-admit\""
mkdir -p "$T/site"
echo "-- the site's own filter" > "$T/site/cli_filter.lua"
bash "$SRC/slurm/install.sh" --memest "$MEMEST" --bin-dir "$T/site" --slurm-conf-dir "$T/site" \
  --config "$T/site/admission.conf" > "$T/site/install.log" 2>&1
rc=$?
check "install.sh refuses to replace a site's own cli_filter.lua (rc $rc)" \
  test $rc -eq 1 -a "$(cat "$T/site/cli_filter.lua")" = "-- the site's own filter"
if ((FAILED)); then
  echo "==== $MODE: memest's cli_filter could not be installed; stopping"
  exit 1
fi

# ------------------------------------------------------------------------------------------------
admission() {
  write_conf() {  # write_conf ACTION MEMEST_PATH
    cat > "$conf" <<EOF
[admission]
memest = $2
action = $1
safety_margin = 5%
timeout = 5
backend = symbolic
log = $T/admission.log

[gpu-types]
a100 = a100-80gb
l4 = l4-24gb
1g.5gb = a100-40gb-mig-1g.5gb
EOF
  }
  write_conf reject "$MEMEST"
  check "--check-config accepts the test table" "$T/bin/memest-admit" --config "$conf" --check-config

  local n=0 OUT ERR RC SECS JOB
  submit() {  # submit ARGS...: sbatch from the source folder; sets OUT ERR RC SECS JOB
    n=$((n + 1))
    local t0
    t0=$(date +%s.%N)
    (cd "$SRC" && sbatch --parsable --output="$T/job-%j.out" "$@") > "$T/out.$n" 2> "$T/err.$n"
    RC=$?
    SECS=$(elapsed "$t0")
    OUT="$T/out.$n" ERR="$T/err.$n"
    JOB=$(cut -d';' -f1 < "$OUT")
    echo "---- sbatch $* -> exit $RC in $SECS s${JOB:+, job $JOB}"
    sed 's/^/     | /' "$ERR"
  }
  local resnet="datasets/models/resnet18_train.onnx"
  local log_lines

  # 1. Fits: a relative model path, read from the job's working directory.
  submit --comment "memest:model=$resnet,batch=32" --gres=gpu:a100:1 --wrap true
  check "fits on a100: submitted" test "$RC" -eq 0 -a -n "$JOB"
  check "fits on a100: nothing printed" test ! -s "$ERR"
  check "fits on a100: logged as accept" contains "$T/admission.log" "verdict='accept: a100: fits"

  # 2. Does not fit: a huge batch on an L4 (24 GB) is rejected, with the numbers and a way out.
  submit --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 --wrap true
  check "batch 1024 on l4: rejected" test "$RC" -ne 0 -a -z "$JOB"
  check "batch 1024 on l4: says rejected, names the type and the profile" \
    contains "$ERR" "memest: job rejected: resnet18_train.onnx (batch 1024) needs"
  check "batch 1024 on l4: says by how much" contains "$ERR" "on GPU type 'l4' (memest profile l4-24gb"
  check "batch 1024 on l4: gives the largest batch that fits" contains "$ERR" "the largest batch that fits 'l4' is"
  check "batch 1024 on l4: names the type where it fits" contains "$ERR" "it fits GPU type 'a100' (--gres=gpu:a100:1)"
  check "batch 1024 on l4: prints the memest command" contains "$ERR" "memest: the estimate: "
  check "batch 1024 on l4: sbatch reports the refusal" contains "$ERR" "sbatch: error: cli_filter plugin terminated with error"
  check "batch 1024 on l4: logged as reject" contains "$T/admission.log" "verdict='reject: l4: does not fit"

  # 3. --gpus=TYPE:N is read too, and a MIG slice's type.
  submit --comment "memest:model=$resnet,batch=1024" --gpus=l4:1 --wrap true
  check "--gpus=l4:1, batch 1024: rejected" test "$RC" -ne 0 -a -z "$JOB"
  submit --comment "memest:model=$resnet,batch=8" --gres=gpu:1g.5gb:1 --wrap true
  check "MIG 1g.5gb, batch 8: submitted" test "$RC" -eq 0 -a -n "$JOB"
  submit --comment "memest:model=$resnet,batch=256" --gres=gpu:1g.5gb:1 --wrap true
  check "MIG 1g.5gb, batch 256: rejected, naming the slice's profile" \
    contains "$ERR" "on GPU type '1g.5gb' (memest profile a100-40gb-mig-1g.5gb"

  # 3b. In a job script (#SBATCH lines), and with srun.
  printf '#!/bin/sh\n#SBATCH --comment=memest:model=%s,batch=1024\n#SBATCH --gres=gpu:l4:1\ntrue\n' "$resnet" > "$T/job.sh"
  submit "$T/job.sh"
  check "#SBATCH --comment/--gres in a job script, batch 1024 on l4: rejected" \
    test "$RC" -ne 0 -a -z "$JOB" -a "$(grep -c "memest: job rejected: resnet18_train.onnx (batch 1024)" "$ERR")" -eq 1
  (cd "$SRC" && timeout 60 srun --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 true) > "$T/srun.out" 2> "$T/srun.err"
  RC=$?
  echo "---- srun --comment memest:model=$resnet,batch=1024 --gres=gpu:l4:1 true -> exit $RC"
  sed 's/^/     | /' "$T/srun.err"
  check "srun, batch 1024 on l4: rejected" test "$RC" -ne 0 -a "$(grep -c "memest: job rejected" "$T/srun.err")" -eq 1
  (cd "$SRC" && timeout 60 srun --comment "memest:model=$resnet,batch=32" --gres=gpu:l4:1 true) > "$T/srun.out" 2> "$T/srun.err"
  RC=$?
  echo "---- srun --comment memest:model=$resnet,batch=32 --gres=gpu:l4:1 true -> exit $RC"
  sed 's/^/     | /' "$T/srun.err"
  # srun's own notes when the node is busy ("job N queued and waiting for resources", "job N has
  # been allocated resources") are not from memest; anything else on stderr is.
  grep -v -E '^srun: job [0-9]+ (queued and waiting for resources|has been allocated resources)$' \
    "$T/srun.err" > "$T/srun.memest.err" || true
  check "srun, batch 32 on l4: admitted and ran" test "$RC" -eq 0 -a ! -s "$T/srun.memest.err"

  # 4. No declaration: untouched, the helper is not even started.
  log_lines=$(wc -l < "$T/admission.log")
  submit --comment "nightly run" --gres=gpu:l4:1 --wrap true
  check "no declaration: submitted" test "$RC" -eq 0 -a -n "$JOB"
  check "no declaration: nothing printed" test ! -s "$ERR"
  check "no declaration: no log line (the helper did not run)" test "$(wc -l < "$T/admission.log")" -eq "$log_lines"
  submit --gres=gpu:l4:1 --wrap true
  check "no comment at all: submitted untouched" test "$RC" -eq 0 -a -n "$JOB" -a ! -s "$ERR"

  # 5. A declared model that cannot be read: rejected with the path and the reason.
  submit --comment "memest:model=/nonexistent/model.onnx,batch=8" --gres=gpu:a100:1 --wrap true
  check "missing model: rejected" test "$RC" -ne 0 -a -z "$JOB"
  check "missing model: names the path and the reason" \
    contains "$ERR" "memest: job rejected: the declared model /nonexistent/model.onnx cannot be read: No such file or directory"
  echo "not an onnx file" > "$T/garbage.onnx"
  submit --comment "memest:model=$T/garbage.onnx,batch=8" --gres=gpu:a100:1 --wrap true
  check "not ONNX: rejected with memest's reason" \
    contains "$ERR" "memest: job rejected: memest cannot read the declared model: $T/garbage.onnx: not an ONNX model"
  submit --comment "memest:model=$resnet,batch=8,colour=blue" --gres=gpu:a100:1 --wrap true
  check "unknown declaration key: rejected, naming it" contains "$ERR" "unknown key 'colour' in the declaration"

  # 6. memest hangs: the check gives up after the timeout (5 s) and lets the job through.
  printf '#!/bin/sh\nsleep 60\n' > "$T/bin/memest-hangs"
  printf '#!/bin/sh\nkill -SEGV $$\n' > "$T/bin/memest-crashes"
  printf '#!/bin/sh\necho "memest: internal error: boom" >&2\nexit 4\n' > "$T/bin/memest-fails"
  chmod +x "$T/bin/memest-hangs" "$T/bin/memest-crashes" "$T/bin/memest-fails"
  write_conf reject "$T/bin/memest-hangs"
  submit --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 --wrap true
  check "memest hangs: submitted anyway" test "$RC" -eq 0 -a -n "$JOB"
  check "memest hangs: warns that the check timed out" contains "$ERR" "did not finish (memest timed out after 5 s); the job is let through unchecked"
  check "memest hangs: submission took the timeout, not the hang ($SECS s, bound 5 s + start-up)" \
    python3 -c "import sys; sys.exit(not (4.5 <= float('$SECS') < 9))"
  check "memest hangs: logged" contains "$T/admission.log" "l4: check failed: memest timed out after 5 s"
  check "memest hangs: no memest left running" test -z "$(pgrep -f "$T/bin/memest-hangs" || true)"
  write_conf reject "$T/bin/memest-crashes"
  submit --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 --wrap true
  check "memest crashes: submitted with a warning" \
    test "$RC" -eq 0 -a -n "$JOB" -a "$(grep -c 'killed by signal 11 (SIGSEGV)' "$ERR")" -eq 1
  write_conf reject "$T/bin/memest-fails"
  submit --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 --wrap true
  check "memest exits 4: submitted with a warning" \
    test "$RC" -eq 0 -a -n "$JOB" -a "$(grep -c 'memest exited 4: internal error: boom' "$ERR")" -eq 1
  echo "this is [not an ini" > "$conf"
  submit --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 --wrap true
  check "broken config: submitted with a warning" \
    test "$RC" -eq 0 -a -n "$JOB" -a "$(grep -c 'the admission check is misconfigured' "$ERR")" -eq 1

  # 6b. memest-admit itself hangs or dies: the plugin's own bound (7 s here) lets the job through.
  write_conf reject "$MEMEST"
  mv "$T/bin/memest-admit" "$T/bin/memest-admit.real"
  printf '#!/bin/sh\nsleep 60\n' > "$T/bin/memest-admit"
  chmod +x "$T/bin/memest-admit"
  submit --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 --wrap true
  check "memest-admit hangs: submitted anyway" test "$RC" -eq 0 -a -n "$JOB"
  check "memest-admit hangs: the plugin warns" contains "$ERR" "memest: warning: the admission check did not answer within 7 s or failed"
  check "memest-admit hangs: submission took the plugin's bound ($SECS s, bound 7 s)" \
    python3 -c "import sys; sys.exit(not (6.5 <= float('$SECS') < 11))"
  printf '#!/bin/sh\necho "Traceback: something broke" >&2\nexit 1\n' > "$T/bin/memest-admit"
  submit --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 --wrap true
  check "memest-admit dies: submitted with its last words" \
    test "$RC" -eq 0 -a -n "$JOB" -a "$(grep -c 'failed (Traceback: something broke); the job is let through unchecked' "$ERR")" -eq 1
  mv "$T/bin/memest-admit.real" "$T/bin/memest-admit"
  sed 's/^a100 = .*/a100 = a100-90gb/' "$conf" > "$conf.tmp" && mv "$conf.tmp" "$conf"
  submit --comment "memest:model=$resnet,batch=32" --gres=gpu:a100:1 --wrap true
  check "a table entry memest does not know: submitted with a warning naming it" \
    test "$RC" -eq 0 -a -n "$JOB" -a "$(grep -c "entry for GPU type 'a100' does not work with this memest (--gpu a100-90gb: unknown GPU profile 'a100-90gb'" "$ERR")" -eq 1

  # 7. action = warn: submitted, with the same numbers as a warning.
  write_conf warn "$MEMEST"
  submit --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 --wrap true
  check "warn: submitted" test "$RC" -eq 0 -a -n "$JOB"
  check "warn: says it will likely run out of memory" contains "$ERR" "memest: warning: this job will likely run out of GPU memory: resnet18_train.onnx (batch 1024) needs"

  # 8. action = upgrade: the request is raised to a type that fits.
  write_conf upgrade "$MEMEST"
  submit --comment "memest:model=$resnet,batch=1024" --gres=gpu:l4:1 --wrap true
  check "upgrade: submitted" test "$RC" -eq 0 -a -n "$JOB"
  check "upgrade: says so" contains "$ERR" "the request was raised to GPU type 'a100' (--gres=gpu:a100:1)"
  local tres=""
  [[ -n "$JOB" ]] && tres=$(scontrol show job "$JOB" | grep -o 'TresPerNode=[^ ]*')
  check "upgrade: slurmctld has the job with gpu:a100:1 ($tres)" test "$tres" = "TresPerNode=gres:gpu:a100:1"
  submit --comment "memest:model=$resnet,batch=100000" --gres=gpu:l4:1 --wrap true
  check "upgrade: rejected when no type fits" test "$RC" -ne 0 -a -z "$JOB"

  # 9. An untyped request: checked against every type of the table.
  write_conf reject "$MEMEST"
  submit --comment "memest:model=$resnet,batch=512" --gres=gpu:1 --wrap true
  check "untyped gpu:1, batch 512: submitted, warning it fits only some types" \
    test "$RC" -eq 0 -a -n "$JOB" -a "$(grep -c "it fits 'a100'" "$ERR")" -eq 1

  # The accepted jobs ran (the fake GPUs schedule like real ones).
  local i
  for ((i = 0; i < 120; i++)); do
    [[ -z "$(squeue -h -o %A)" ]] && break
    sleep 0.25
  done
  check "every accepted job ran and left the queue" test -z "$(squeue -h -o %A)"
  echo "---- admission log ($T/admission.log):"
  sed 's/^/     | /' "$T/admission.log"
}

# ------------------------------------------------------------------------------------------------
wait_jobs() {  # wait_jobs SECONDS JOBID...: until none is in the queue
  local limit=$1 i
  shift
  for ((i = 0; i < limit * 4; i++)); do
    [[ -z "$(squeue -h -j "$(IFS=,; echo "$*")" -o %A 2> /dev/null)" ]] && return 0
    sleep 0.25
  done
  return 1
}
job_state() { scontrol show job "$1" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | head -n 1 | cut -d= -f2; }

sweep() {
  local manifest="$HERE/sweep-manifest.jsonl" out="$T/sweep" shards=3
  mkdir -p "$out"
  local total
  total=$(grep -c . "$manifest")
  # Which shard holds the most configurations (the split is by row id: the same on every run).
  local i count k=-1 most=0 counts=()
  for ((i = 0; i < shards; i++)); do
    count=$("$MEASURE" --sweep "$manifest" --shard "$i/$shards" --out "$out/none.jsonl" --dry-run 2> /dev/null | wc -l)
    counts+=("$count")
    if ((count > most)); then most=$count; k=$i; fi
  done
  echo "---- $total configurations, shards ${counts[*]}; task $k ($most configurations) will be cancelled mid-way"
  local sum=0
  for count in "${counts[@]}"; do sum=$((sum + count)); done
  check "the shards split the manifest exactly (${counts[*]}: $sum = $total)" test "$sum" -eq "$total"
  check "the cancelled shard has at least 2 configurations" test "$most" -ge 2

  local t0 submit_out array
  t0=$(date +%s.%N)
  submit_out=$(bash "$SRC/scripts/slurm_sweep.sh" submit "$manifest" "$out" "$shards" --measure "$MEASURE" \
    --no-merge --sbatch "--cpus-per-task=1 --export=ALL,OMP_NUM_THREADS=1" -- --device cpu 2>&1)
  echo "$submit_out" | sed 's/^/     | /'
  array=$(echo "$submit_out" | sed -n 's/^array job \([0-9]*\):.*/\1/p')
  check "the array job was submitted" test -n "$array"
  [[ -n "$array" ]] || return

  # Cancel task k as soon as it has written its first row (it has more to go).
  local shard_k="$out/shard-$k-of-$shards.jsonl" rows_at_kill=0
  for ((i = 0; i < 600; i++)); do
    [[ -f "$shard_k" ]] && (($(grep -c '' "$shard_k") >= 1)) && break
    sleep 0.1
  done
  scancel "${array}_$k"
  wait_jobs 30 "${array}_$k"
  rows_at_kill=$(wc -l < "$shard_k")  # whole lines: a row cut mid-write is not one
  cp "$shard_k" "$T/shard-at-kill.jsonl"
  echo "---- cancelled task ${array}_$k with $rows_at_kill of its $most rows written ($(elapsed "$t0") s after submission)"
  check "task $k was cancelled ($(job_state "${array}_$k"))" test "$(job_state "${array}_$k")" = CANCELLED
  check "task $k was cancelled mid-way ($rows_at_kill of $most rows)" test "$rows_at_kill" -ge 1 -a "$rows_at_kill" -lt "$most"
  check "the other tasks finished" wait_jobs 300 "$array"
  for ((i = 0; i < shards; i++)); do
    ((i == k)) && continue
    check "task $i: COMPLETED ($(job_state "${array}_$i"))" test "$(job_state "${array}_$i")" = COMPLETED
  done

  # A kill can also land while a row is being written: leave a partial last line, as that would.
  head -n 1 "$shard_k" | head -c 150 >> "$shard_k"

  # Resume: the same submission, only task k, with the merge job after it.
  submit_out=$(bash "$SRC/scripts/slurm_sweep.sh" submit "$manifest" "$out" "$shards" --measure "$MEASURE" \
    --only "$k" --sbatch "--cpus-per-task=1 --export=ALL,OMP_NUM_THREADS=1" -- --device cpu 2>&1)
  echo "$submit_out" | sed 's/^/     | /'
  local resume merge
  resume=$(echo "$submit_out" | sed -n 's/^array job \([0-9]*\):.*/\1/p')
  merge=$(echo "$submit_out" | sed -n 's/^merge job \([0-9]*\) .*/\1/p')
  check "resume and merge jobs submitted" test -n "$resume" -a -n "$merge"
  [[ -n "$resume" && -n "$merge" ]] || return
  check "the resumed task and the merge finished" wait_jobs 300 "$resume" "$merge"
  echo "---- the resumed task's log:"
  sed 's/^/     | /' "$out/memest-sweep-${resume}_$k.out"
  echo "---- the merge job's log:"
  sed 's/^/     | /' "$out/merge-$merge.out"
  check "resumed task: COMPLETED" test "$(job_state "${resume}_$k")" = COMPLETED
  check "resumed task: cut off the partial line" contains "$out/memest-sweep-${resume}_$k.out" "cut off a partial last line (150 bytes)"
  check "resumed task: skipped the $rows_at_kill rows written before the kill" \
    contains "$out/memest-sweep-${resume}_$k.out" "$((most - rows_at_kill)) run ($((most - rows_at_kill)) ok, 0 oom, 0 error), $rows_at_kill already in"
  check "merge job: COMPLETED (every configuration has a row)" test "$(job_state "$merge")" = COMPLETED
  check "merge job: says so" contains "$out/merge-$merge.out" "every one of the $total configurations of $manifest has a row"

  # The rows themselves.
  python3 - "$manifest" "$out" "$shards" "$k" "$array" "$resume" "$T/shard-at-kill.jsonl" \
    > "$T/rows-check.out" 2>&1 <<'EOF'
import json, os, sys
manifest, out, shards, k, first, resume, at_kill = sys.argv[1:]
shards, k = int(shards), int(k)
fails = 0
def check(name, cond):
    global fails
    print(("ok   " if cond else "FAIL ") + name)
    fails += 0 if cond else 1
want = []
for line in open(manifest):
    if line.strip():
        m = json.loads(line)
        want.append((m["model"], m["batch"], m.get("mode", "train"),
                     m.get("optimizer", "adam") if m.get("mode", "train") == "train" else None))
merged = [l.rstrip("\n") for l in open(os.path.join(out, "rows.jsonl"))]
rows = [json.loads(l) for l in merged]
ids = [r["id"] for r in rows]
check("rows.jsonl: %d rows for %d configurations" % (len(rows), len(want)), len(rows) == len(want))
check("rows.jsonl: no id twice", len(set(ids)) == len(ids))
got = [(r["model"]["path"], r["config"]["batch"], r["config"]["mode"], r["config"]["optimizer"])
       for r in rows]
check("rows.jsonl: every configuration of the manifest exactly once",
      sorted(got, key=str) == sorted(want, key=str))
check("rows.jsonl: every row measured (status ok)", all(r["status"] == "ok" for r in rows))
check("rows.jsonl: in manifest order", [(r["model"]["path"], r["config"]["batch"], r["config"]["mode"])
                                        for r in rows] == [w[:3] for w in want])
p_ok = all(r["provenance"]["tool"].startswith("memest-measure") and r["provenance"]["git_commit"]
           and r["provenance"]["host"] and r["provenance"]["time_utc"] and r["model"]["sha256"]
           for r in rows)
check("provenance: tool, git commit, host, time and model sha256 on every row", p_ok)
shard_of = {}
for i in range(shards):
    lines = [l.rstrip("\n") for l in open(os.path.join(out, "shard-%d-of-%d.jsonl" % (i, shards)))]
    rs = [json.loads(l) for l in lines]
    check("shard %d: every line a row, no id twice" % i, len(set(r["id"] for r in rs)) == len(rs))
    check("shard %d: provenance.shard is %d/%d" % (i, i, shards),
          all(r["provenance"].get("shard") == "%d/%d" % (i, shards) for r in rs))
    for l in lines:
        shard_of[json.loads(l)["id"]] = (i, l)
check("every merged row is a shard's row, byte for byte", all(shard_of.get(json.loads(l)["id"], (0, None))[1] == l
                                                             for l in merged))
kill_lines = [l.rstrip("\n") for l in open(at_kill) if l.endswith("\n")]
final_k = [l.rstrip("\n") for l in open(os.path.join(out, "shard-%d-of-%d.jsonl" % (k, shards)))]
check("shard %d: the %d rows written before the kill kept byte for byte" % (k, len(kill_lines)),
      final_k[:len(kill_lines)] == kill_lines and all(l in merged for l in kill_lines))
before = [json.loads(l)["provenance"].get("slurm", {}) for l in kill_lines]
after = [json.loads(l)["provenance"].get("slurm", {}) for l in final_k[len(kill_lines):]]
check("shard %d: rows before the kill came from array job %s, task %d" % (k, first, k),
      all(s.get("array_job_id") == int(first) and s.get("array_task_id") == k for s in before))
check("shard %d: rows after it from the resumed array job %s" % (k, resume),
      len(after) > 0 and all(s.get("array_job_id") == int(resume) and s.get("array_task_id") == k
                             for s in after))
others = [json.loads(l)["provenance"].get("slurm", {}) for l in merged
          if shard_of[json.loads(l)["id"]][0] != k]
check("the other shards' rows came from array job %s, cluster memesttest" % first,
      all(s.get("array_job_id") == int(first) and s.get("cluster") == "memesttest" for s in others))
sys.exit(1 if fails else 0)
EOF
  local prc=$?
  cat "$T/rows-check.out"
  CHECKS=$((CHECKS + $(grep -c -E '^(ok|FAIL) ' "$T/rows-check.out")))
  FAILED=$((FAILED + $(grep -c '^FAIL ' "$T/rows-check.out")))
  if ((prc != 0)) && ! grep -q '^FAIL ' "$T/rows-check.out"; then fail "the row checks ran (exit $prc)"; fi

  # Two sweeps never write one file: a held lock makes the second one stop.
  flock "$shard_k" "$MEASURE" --sweep "$manifest" --shard "$k/$shards" --out "$shard_k" --device cpu \
    > "$T/locked.out" 2> "$T/locked.err"
  local lrc=$?
  check "a second sweep on a locked output stops (exit $lrc): $(head -c 120 "$T/locked.err")" \
    test "$lrc" -eq 4 -a "$(grep -c 'another memest-measure is writing' "$T/locked.err")" -eq 1
  check "the merged file still has $total rows" test "$(grep -c '' "$out/rows.jsonl")" -eq "$total"
}

case "$MODE" in
  admission) admission ;;
  sweep) sweep ;;
  *) echo "run.sh: mode must be admission or sweep"; exit 2 ;;
esac
echo "==== $MODE: $((CHECKS - FAILED)) of $CHECKS checks passed in $(elapsed "$START") s"
((FAILED == 0))
