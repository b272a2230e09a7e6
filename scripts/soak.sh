#!/usr/bin/env bash
# soak.sh: the soak of issue #27 item 8. Runs e2e/bench/soak (3 spillway
# replicas on one real etcd, 20,000 heartbeating leases, 2,000 xDS streams,
# 50 registrations/s of churn, a replica killed with SIGKILL every 2
# minutes) and keeps what it printed, with the machine and its load
# before and after, in one directory.
#
#   scripts/soak.sh [-short] [-o DIR] [SOAK FLAGS...]
#
#   -short   the 90 s smoke run (go run ./e2e/bench/soak --short)
#   -o DIR   where the report goes (default soak-out/; its earlier report is replaced):
#            report.md (the machine, uptime before and after, the command
#            and the soak's markdown), samples.csv (every sample), logs/
#            (etcd's and each replica's log, the replicas' goroutine
#            profiles at the end)
#   SOAK FLAGS  passed on, e.g. --duration 30m (see go run ./e2e/bench/soak -h)
#
# Needs /usr/bin/etcd (scripts/test-deps.sh installs Debian's etcd-server;
# --etcd PATH for another). Run it alone on the machine: the figures are
# only worth what the machine's load lets them be. The exit code is the
# soak's: 1 when a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."

out=soak-out
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -short|--short) args+=(--short); shift ;;
    -o) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
etcd=/usr/bin/etcd
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[$i]}" = --etcd ] && [ $((i + 1)) -lt ${#args[@]} ]; then etcd="${args[$((i + 1))]}"; fi
done
if [ ! -x "$etcd" ]; then
  echo "soak.sh: no etcd at $etcd (scripts/test-deps.sh installs etcd-server)" >&2
  exit 2
fi

mkdir -p "$out"
rm -rf "$out/report.md" "$out/samples.csv" "$out/soak.log" "$out/logs"
mkdir -p "$out/logs"
report="$out/report.md"
cmd=(go run ./e2e/bench/soak "${args[@]}" --csv "$out/samples.csv" --logs "$out/logs")
{
  echo "# soak.sh run of $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -g | awk '/^Mem:/ {print $2}') GiB, $(uname -sr)"
  echo "- uptime before: $(uptime)"
  echo "- command: ${cmd[*]}"
  echo
} >"$report"

status=0
# The driver's progress goes to the terminal and to soak.log.
"${cmd[@]}" >>"$report" 2> >(tee "$out/soak.log" >&2) || status=$?
{
  echo
  echo "- uptime after: $(uptime)"
  echo "- exit code: $status"
} >>"$report"
cat "$report"
echo "soak.sh: report in $report, driver log in $out/soak.log" >&2
exit "$status"
