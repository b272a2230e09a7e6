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
# Debian's etcd-server and dnsperf). As root it raises
# net.core.netdev_max_backlog to 65,536 for the run and puts it back after
# (see below); the report says what it found. Run it alone on the
# machine: at 100 % it holds a million endpoints in several processes at
# once and its figures are only worth what the machine's load lets them
# be. The exit
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

# Loopback packets pass through the kernel's per-CPU input backlog
# (net.core.netdev_max_backlog, 1,000 by default), and a burst from tens of
# thousands of connections overflows it. The dropped segments wait for a
# retransmission timeout, and a connection whose data stays unacknowledged
# past grpc-go's TCP_USER_TIMEOUT (its keepalive timeout: 5 s in the
# go-control-plane example's setup) is reset: the xds part's baselines then
# spent their change windows opening thousands of streams again. The script
# raises the backlog where it may and says so in the report.
backlog=/proc/sys/net/core/netdev_max_backlog
backlog_note="net.core.netdev_max_backlog: $(cat "$backlog" 2>/dev/null || echo unknown)"
backlog_was=""
restore_backlog() {
  if [ -n "$backlog_was" ]; then
    echo "$backlog_was" >"$backlog" || echo "scale.sh: could not put $backlog back to $backlog_was" >&2
  fi
}
tmp="$(mktemp)"
trap 'rm -f "$tmp"; restore_backlog' EXIT
if [ -w "$backlog" ] && [ "$(cat "$backlog")" -lt 65536 ]; then
  backlog_was="$(cat "$backlog")"
  backlog_note="net.core.netdev_max_backlog: raised from $backlog_was to 65536 for the run"
  echo 65536 >"$backlog"
fi
{
  echo "uptime before: $(uptime)"
  echo "command: go run ./e2e/bench/scale ${args[*]:-}"
  echo "$backlog_note"
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
restore_backlog
echo "report: $out"
exit "$status"
