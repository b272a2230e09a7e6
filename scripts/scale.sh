#!/usr/bin/env bash
# scale.sh: the region of issue #31 at 10 %, 50 % and 100 % of its size
# (1,000,000 endpoints in 50,000 services over 3 zones, 50,000 xDS streams,
# 1,000 registrations/s of churn, a shared etcd) and every figure a replica
# must meet at each size. It runs e2e/bench/scale and keeps its report, with
# the machine and its load before and after, in one file.
#
#   scripts/scale.sh [-o FILE] [SCALE FLAGS...]
#
#   -o FILE      where the report goes (default scale-out.md)
#   SCALE FLAGS  passed on, e.g. --sizes 0.01,0.1 --parts xds,weights
#                (go run ./e2e/bench/scale -h lists the parts)
#
# Needs /usr/bin/etcd and /usr/bin/dnsperf (scripts/test-deps.sh installs
# Debian's etcd-server and dnsperf). Run it alone on the machine: at 100 %
# it holds a million endpoints in several processes at once and its
# figures are only worth what the machine's load lets them be. The exit
# code is the command's: 1 when a part failed to run (a figure that misses
# its target is marked in the report, not an error).
set -euo pipefail
cd "$(dirname "$0")/.."

out=scale-out.md
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done

# 50,000 streams need a descriptor each, on both ends.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
{
  echo "uptime before: $(uptime)"
  echo "command: go run ./e2e/bench/scale ${args[*]:-}"
  echo
} >"$tmp"
status=0
go run ./e2e/bench/scale "${args[@]}" >>"$tmp" || status=$?
{
  echo
  echo "uptime after: $(uptime)"
} >>"$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "report: $out"
exit "$status"
