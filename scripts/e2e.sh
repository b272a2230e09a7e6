#!/usr/bin/env bash
# e2e.sh: runs the end-to-end package (./e2e) with -race as N test
# processes side by side, so that its tests' waits (leases expiring,
# elections, report cycles) overlap, then the tests that measure load or
# time in one process alone. make e2e runs it.
#
#   scripts/e2e.sh [-n N] [-timeout D]
#
#   -n N        test processes side by side (default 2; E2E_SHARDS sets it
#               too; 1 runs the package in one process and then the
#               "alone" tests in another)
#   -timeout D  each process's -test.timeout (default 20m)
#
# The test binary is built once (go test -race -c). Its tests are dealt
# out by the seconds scripts/e2e-times.txt gives them (longest first, each
# to the process with the least so far; a test the file does not list
# counts 10 s), so add a line there for a test that takes long. A test
# marked "alone" there (it drives a load and checks that the machine
# sustained it, or judges a time against a TTL) runs after the others,
# in a process of its own. Each process gets its own share of the
# loopback ports (TESTPORT_SHARD, internal/testport). Each process's
# output is printed when it ends, with its time; the exit code is 1 if
# any process failed.
set -euo pipefail
cd "$(dirname "$0")/.."

n="${E2E_SHARDS:-2}" timeout=20m
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    -timeout) timeout="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "e2e.sh: unknown argument $1 (see -h)" >&2; exit 2 ;;
  esac
done
case "$n" in ''|*[!0-9]*|0) echo "e2e.sh: -n must be a positive number, got '$n'" >&2; exit 2 ;; esac

dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do pkill -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

go test -race -c -o "$dir/e2e.test" ./e2e
(cd e2e && "$dir/e2e.test" -test.list '.*') | grep '^Test' >"$dir/tests"
# "seconds name" for every test, longest first, then one line of
# "A|B|..." per process; the tests marked "alone" go on a last line of
# their own.
awk 'NR == FNR { if ($1 !~ /^#/ && NF >= 2) { secs[$2] = $1; alone[$2] = ($3 == "alone") }; next }
     { print (($1 in secs) ? secs[$1] : 10), $1, (alone[$1] ? "alone" : "side") }' scripts/e2e-times.txt "$dir/tests" |
  sort -k1,1nr -k2,2 |
  awk -v n="$n" '$3 == "alone" { solo = solo (solo == "" ? "" : "|") $2; next }
                 { best = 0
                   for (i = 1; i < n; i++) if (load[i] < load[best]) best = i
                   load[best] += $1
                   names[best] = names[best] (names[best] == "" ? "" : "|") $2 }
                 END { for (i = 0; i < n; i++) print names[i]; print solo }' >"$dir/shards"

# run I NAMES: test process I on the tests NAMES, in the background.
run() {
  local i="$1" names="$2"
  (
    s=$(date +%s)
    cd e2e
    rc=0
    TESTPORT_SHARD="$i/$((n + 1))" "$dir/e2e.test" -test.count=1 -test.timeout="$timeout" -test.run "^($names)\$" || rc=$?
    echo $(( $(date +%s) - s )) >"$dir/time$i"
    exit "$rc"
  ) >"$dir/shard$i.log" 2>&1 &
  pids+=("$!")
  echo "e2e process $i (pid $!): $(echo "$names" | tr '|' '\n' | wc -l) tests"
}

# finish: waits for every process started, prints each one's output;
# rc becomes 1 if one failed.
finish() {
  local j status
  for j in "${!pids[@]}"; do
    if wait "${pids[$j]}"; then status=ok; else status="FAILED (exit $?)"; rc=1; fi
    echo "== e2e process ${ids[$j]}: $status in $(cat "$dir/time${ids[$j]}" 2>/dev/null || echo '?')s"
    cat "$dir/shard${ids[$j]}.log"
  done
  pids=() ids=()
}

rc=0
ids=()
i=0
while read -r names; do
  if [ "$i" -lt "$n" ] && [ -n "$names" ]; then
    run "$i" "$names"
    ids+=("$i")
  elif [ "$i" -eq "$n" ]; then
    solo="$names"
  fi
  i=$((i + 1))
done <"$dir/shards"
finish
if [ -n "${solo:-}" ]; then
  echo "e2e: the tests that measure load or time, alone:"
  run "$n" "$solo"
  ids+=("$n")
  finish
fi
exit "$rc"
