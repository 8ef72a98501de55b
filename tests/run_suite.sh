#!/usr/bin/env bash
# The suite as `make test` runs it, against servers already started (DYNCC_TEST_* set):
#   1. side by side: the tests of no group on TEST_WORKERS pytest-xdist workers, the cluster's
#      tests one after another, the tests with private servers one after another (tests/conftest.py
#      sets the marks; the group runs' lines are prefixed with their name);
#   2. then the `serial` tests (the lab, the namespace tests) one at a time.
# Extra arguments go to every pytest run.  Exit: the first failing run's status; "no tests
# collected" (5) in every run is a failure (5), in some runs only is not.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PY:-.venv/bin/python}
WORKERS=${TEST_WORKERS:-2}
common=(-q -p no:cacheprovider)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run_group() {  # NAME MARKEXPR ARGS...: one pytest run, lines prefixed, its status on the last line
    local name=$1 expr=$2; shift 2
    "$PY" -m pytest "${common[@]}" --durations=10 -m "$expr" "$@" 2>&1 | sed -u "s/^/[$name] /" | tee "$logs/$name"
    return "${PIPESTATUS[0]}"
}

echo "== pytest, part 1: side by side (the rest on $WORKERS workers; the cluster's; the private servers')"
"$PY" -m pytest "${common[@]}" --durations=15 -n "$WORKERS" \
    -m "not serial and not cluster_group and not servers_group" "$@" > >(tee "$logs/rest") 2>&1 &
p_rest=$!
run_group cluster "cluster_group and not serial" "$@" &
p_cluster=$!
run_group servers "servers_group and not serial" "$@" &
p_servers=$!
codes=()
for p in $p_rest $p_cluster $p_servers; do
    rc=0; wait "$p" || rc=$?; codes+=("$rc")
done
echo "== pytest, part 2: the serial tests, one at a time"
rc=0; "$PY" -m pytest "${common[@]}" --durations=30 -m serial "$@" > >(tee "$logs/serial") 2>&1 || rc=$?
codes+=("$rc")
sleep 0.2  # the tee of the last run
echo "== pytest exit statuses (rest, cluster, servers, serial): ${codes[*]}"
# every run's failures once more, at the end where a CI log's tail shows them
cat "$logs"/* | grep -E '^(\[[a-z]+\] )?(FAILED|ERROR) ' | sed 's/^/== /' || true
all5=1
for rc in "${codes[@]}"; do [[ $rc == 5 ]] || all5=0; done
if [[ $all5 == 1 ]]; then echo "== pytest collected no tests: treating as failure"; exit 5; fi
for rc in "${codes[@]}"; do
    if [[ $rc != 0 && $rc != 5 ]]; then exit "$rc"; fi
done
exit 0
