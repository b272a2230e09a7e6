#!/usr/bin/env bash
# timed.sh LABEL COMMAND...: runs COMMAND and then prints how long it took
# under LABEL, whether it passed or failed, keeping its exit code. make
# test uses it so a slow group shows in any CI log.
set -uo pipefail
label="$1"; shift
start=$(date +%s)
"$@"
rc=$?
status=ok; [ "$rc" -eq 0 ] || status="FAILED (exit $rc)"
echo "== $label: $status in $(( $(date +%s) - start ))s"
exit "$rc"
