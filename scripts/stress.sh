#!/usr/bin/env bash
# stress.sh: a flake hunt you can rerun. Runs the chosen packages' tests
# N times with the race detector while a CPU burner keeps one core busy,
# then prints how many runs each test passed.
#
#   scripts/stress.sh [-n N] [-run REGEX] [-burn CORES] [-timeout D] [-keep] [PACKAGES...]
#
#   -n N        runs of each test (go test -count=N; default 5)
#   -run REGEX  only tests matching REGEX (go test -run; default all)
#   -burn C     cores kept at 100% by busy loops while the tests run (default 1; 0 for none)
#   -timeout D  go test -timeout (default 60m)
#   -keep       keep every package's log in stress-logs/, not only failing ones
#   PACKAGES    go packages (default ./...)
#
# Each package runs in its own go test process, one after another, so the
# burner is the only other load. The output is one line per test that ran:
# "passed/runs  package  test", failures first, then the log of each
# failing package under stress-logs/ (emptied at the start of each run).
# The exit code is 1 if any test failed in any run.
set -euo pipefail
cd "$(dirname "$0")/.."

n=5 run="" burn=1 timeout=60m keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    -run) run="$2"; shift 2 ;;
    -burn) burn="$2"; shift 2 ;;
    -timeout) timeout="$2"; shift 2 ;;
    -keep) keep=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "stress.sh: unknown flag $1 (see -h)" >&2; exit 2 ;;
    *) break ;;
  esac
done
case "$n" in ''|*[!0-9]*|0) echo "stress.sh: -n must be a positive number, got '$n'" >&2; exit 2 ;; esac
case "$burn" in ''|*[!0-9]*) echo "stress.sh: -burn must be a number of cores, got '$burn'" >&2; exit 2 ;; esac
[ $# -gt 0 ] || set -- ./...
pkgs=$(go list "$@")

logs=$(mktemp -d)
rm -rf stress-logs
burners=()
stop_burners() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
  burners=()
}
trap 'stop_burners; rm -rf "$logs"' EXIT
# Each burner is a shell busy loop, bounded by timeout in case this
# script is killed before its trap runs.
for _ in $(seq 1 "$burn"); do
  timeout 6h sh -c 'while :; do :; done' &
  burners+=("$!")
done
echo "stress: $n runs, ${burn} core(s) busy, $(echo "$pkgs" | wc -l) package(s), run '${run:-all}'"

failed=0
results="$logs/results"
: >"$results"
for pkg in $pkgs; do
  log="$logs/$(echo "$pkg" | tr / _).log"
  start=$(date +%s)
  args=(test -race -count="$n" -timeout "$timeout" -v)
  [ -n "$run" ] && args+=(-run "$run")
  if go "${args[@]}" "$pkg" >"$log" 2>&1; then status=ok; else status=FAIL; failed=1; fi
  echo "  $status $pkg ($(( $(date +%s) - start ))s)"
  # "--- PASS: TestX/sub (1.2s)" lines, subtests included; a package that
  # failed without any such line (a build error, a panic, a timeout) is
  # counted as one failure of the package itself.
  awk -v pkg="$pkg" '
    /^ *--- (PASS|FAIL): / { name=$3; runs[name]++; if ($2 == "PASS:") pass[name]++ }
    END { for (t in runs) printf "%d %d %s %s\n", pass[t]+0, runs[t], pkg, t }
  ' "$log" >>"$results"
  if [ "$status" = FAIL ] && ! grep -q -- '^ *--- FAIL: ' "$log"; then
    echo "0 1 $pkg (package: build error, panic or timeout)" >>"$results"
  fi
  if [ "$status" = FAIL ] || [ "$keep" = 1 ]; then
    mkdir -p stress-logs
    cp "$log" stress-logs/
  fi
done
stop_burners

echo
echo "passed/runs  package  test"
# Failures first, then everything else by package and test.
awk '$1 != $2' "$results" | sort -k3,3 -k4,4 | awk '{ printf "%d/%d  %s  %s\n", $1, $2, $3, $4 }'
awk '$1 == $2' "$results" | sort -k3,3 -k4,4 | awk '{ printf "%d/%d  %s  %s\n", $1, $2, $3, $4 }'
total=$(awk '{ r += $2; p += $1 } END { print p "/" r }' "$results")
echo "total: $total passed"
if [ "$failed" -ne 0 ]; then echo "logs of failing packages: stress-logs/"; fi
exit "$failed"
