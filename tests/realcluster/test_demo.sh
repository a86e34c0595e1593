#!/usr/bin/env bash
# test_demo.sh SOURCE_DIR KMPROXY: `make demo`'s driver (tests/realcluster/demo.py) end to end on the real cluster:
# exit 0 with kmproxy verify's all-clear, nothing left running; then a step that fails (kmproxy's daemon exits at
# once) and a Ctrl-C while the cluster starts each exit non-zero, say so, print no all-clear and leave nothing behind.
# Skips (77) without Java/Maven unless CI or KM_REQUIRE_REALKAFKA=1, as the other real-cluster suites do.
set -uo pipefail
src=$1 kmproxy=$2
demo="python3 $src/tests/realcluster/demo.py"
work=$(mktemp -d "${TMPDIR:-/tmp}/test_demo.XXXXXX")
fail() { echo "test_demo: FAIL: $*; the runs' logs are kept in $work" >&2; exit 1; }
leftovers() { # any process still running from run dir $1
  ps -eo pid=,args= | grep -F -- "$1" | grep -v grep
}

# 1. the demo: real ZK-mode brokers converge, verify's all-clear, exit 0
$demo --kmproxy "$kmproxy" --keep "$work/ok" >"$work/ok.out" 2>&1
rc=$?
cat "$work/ok.out"
if [ $rc = 69 ]; then
  [ -n "${CI:-}" ] || [ "${KM_REQUIRE_REALKAFKA:-}" = 1 ] && fail "Java or Maven missing (required here)"
  echo "test_demo: skipped: Java or Maven missing"; exit 77
fi
[ $rc = 0 ] || fail "the demo exited $rc"
for want in "converged: every real ZK-mode broker's Metadata answer" "0 missing in ZooKeeper, 0 different, 0 only in ZooKeeper" \
            "verdict: consistent" "demo: all clear" "demo: tearing down"; do
  grep -qF -- "$want" "$work/ok.out" || fail "the demo's output lacks '$want'"
done
[ "$(grep -c '^  [0-9] .* zk  *yes  *0 ' "$work/ok.out")" = 3 ] || fail "kmproxy verify did not check 3 ZK-mode brokers clean"
leftovers "$work/ok" && fail "the demo left processes running"

# 2. a failing step: kmproxy's daemon exits at once (every other subcommand is the real binary's)
cat >"$work/kmproxy" <<STUB
#!/bin/sh
[ "\$1" = run ] && { echo "stub: refusing to run" >&2; exit 3; }
exec "$kmproxy" "\$@"
STUB
chmod +x "$work/kmproxy"
$demo --kmproxy "$work/kmproxy" --keep "$work/bad" >"$work/bad.out" 2>&1
rc=$?
cat "$work/bad.out"
[ $rc = 1 ] || fail "a demo whose kmproxy exits at once exited $rc, not 1"
grep -q "demo: FAILED: kmproxy exited 3" "$work/bad.out" || fail "the failed demo does not say what failed"
grep -qE "all clear|verdict" "$work/bad.out" && fail "the failed demo printed a result"
leftovers "$work/bad" && fail "the failed demo left processes running"

# 3. Ctrl-C while the cluster starts
$demo --kmproxy "$kmproxy" --keep "$work/int" >"$work/int.out" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "demo: starting ZooKeeper" "$work/int.out" && break; sleep 0.1; done
sleep 1
kill -INT $pid
wait $pid
rc=$?
cat "$work/int.out"
[ $rc = 130 ] || fail "an interrupted demo exited $rc, not 130"
grep -q "demo: INTERRUPTED" "$work/int.out" || fail "the interrupted demo does not say so"
grep -qE "all clear|verdict" "$work/int.out" && fail "the interrupted demo printed a result"
sleep 1  # the rig's JVMs die with it (PR_SET_PDEATHSIG); give the kernel a moment
leftovers "$work/int" && fail "the interrupted demo left processes running"
# 4. the KAFKA-21062 replay without its test binary: a failure, no figures
$demo --kafka21062 --tests-dir "$work/none" >"$work/k.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "demo: FAILED: .*test_kafka21062 not built" "$work/k.out" || fail "the replay without its binary exited $rc: $(cat "$work/k.out")"
grep -q "acknowledged" "$work/k.out" && fail "the replay without its binary printed figures"
rm -rf "$work"
echo "test_demo: the demo's all-clear on the real cluster; a failed step and Ctrl-C exit non-zero with nothing left"
