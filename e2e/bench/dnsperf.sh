#!/usr/bin/env bash
# Side-by-side DNS benchmark: spillway's resolver against the ceiling, a
# minimal miekg/dns server answering the same records from a static map
# (e2e/bench/dnsceiling). Both load the same services file (100 services,
# 3-20 endpoints each, from e2e/bench/gendns) and get the same query mix
# (70% SRV, 25% A, 5% NXDOMAIN) from dnsperf on loopback, in alternating
# rounds. It prints per-round QPS and latency, how each server answered the
# mix (response codes, truncation, reply sizes, and whether the full answers
# agree), and the ratio spillway/ceiling of the median QPS.
#
# Run from the repository root:
#
#   bash e2e/bench/dnsperf.sh
#
# Environment (all optional):
#   ROUNDS=3              measured rounds; each runs every target once
#   SECONDS_PER_ROUND=10  dnsperf -l of one measured run
#   WARMUP_SECONDS=2      unmeasured dnsperf run per target before round 1 (0: none)
#   TARGETS="spillway ceiling"  which servers to run; TARGETS=ceiling runs the ceiling alone
#   CLIENTS=4 THREADS=2 OUTSTANDING=100   dnsperf -c, -T and -q
#   SEED=1                gendns seed (services and query mix)
#   SPILLWAY_PORT, CEILING_PORT   fixed ports (default: free ports picked at random)
#   KEEP=DIR              copy the generated files, logs and raw dnsperf output to DIR
#
# UDP only: over TCP both servers (miekg/dns, MaxTCPQueries 128) close each
# connection after 128 queries and dnsperf's reconnects dominate the result.
# Queries go to 127.0.0.1 only. Every wait is bounded, and both servers are
# stopped on exit, including on Ctrl-C.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-10}
WARMUP_SECONDS=${WARMUP_SECONDS:-2}
TARGETS=${TARGETS:-"spillway ceiling"}
CLIENTS=${CLIENTS:-4}
THREADS=${THREADS:-2}
OUTSTANDING=${OUTSTANDING:-100}
SEED=${SEED:-1}
KEEP=${KEEP:-}
if [ -n "$KEEP" ] && [[ $KEEP != /* ]]; then KEEP="$PWD/$KEEP"; fi
DOMAIN=spillway.internal.
BUFSIZE=1232

die() { echo "dnsperf.sh: $*" >&2; exit 1; }

for v in ROUNDS SECONDS_PER_ROUND WARMUP_SECONDS CLIENTS THREADS OUTSTANDING SEED; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v=${!v}: want a whole number"
done
[ "$ROUNDS" -ge 1 ] && [ "$SECONDS_PER_ROUND" -ge 1 ] || die "ROUNDS and SECONDS_PER_ROUND must be at least 1"
targets=()
for t in $TARGETS; do
  case "$t" in
    spillway|ceiling) targets+=("$t") ;;
    *) die "TARGETS: unknown target $t (want spillway and/or ceiling)" ;;
  esac
done
[ "${#targets[@]}" -ge 1 ] || die "TARGETS is empty"
for tool in go dnsperf dig ss timeout; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (dnsperf: Debian package dnsperf; dig: bind9-dnsutils)"
done

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -f go.mod ] && [ -d cmd/spillway ] || die "cannot find the repository root"

work=$(mktemp -d "${TMPDIR:-/tmp}/spillway-dnsbench.XXXXXX")
declare -A pid=() port=()

cleanup() {
  local p alive
  for p in "${pid[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 30); do
    alive=0
    for p in "${pid[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for p in "${pid[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ -n "$KEEP" ]; then
    local f
    mkdir -p "$KEEP" || true
    for f in "$work"/*; do
      [ "$f" = "$work/bin" ] || cp -r "$f" "$KEEP"/ || true
    done
    echo "kept files in $KEEP"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port prints a port that nothing listens on, TCP or UDP, on loopback.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 30000))
    if [ -z "$(ss -Hlnut "sport = :$p" 2>/dev/null)" ] && [[ " ${port[*]} " != *" $p "* ]]; then
      echo "$p"
      return 0
    fi
  done
  die "no free port found"
}

# wait_ready waits until the target answers an A query for svc-000.
wait_ready() {
  local t=$1 out
  for _ in $(seq 1 50); do
    kill -0 "${pid[$t]}" 2>/dev/null || { tail -n 20 "$work/$t.log" >&2; die "$t exited before answering DNS"; }
    out=$(dig +short +time=1 +tries=1 @127.0.0.1 -p "${port[$t]}" "svc-000.$DOMAIN" A 2>/dev/null || true)
    # +short prints the addresses; errors (refused, timed out) start with ";;".
    [[ $out =~ ^[0-9] ]] && return 0
    sleep 0.2
  done
  tail -n 20 "$work/$t.log" >&2
  die "$t did not answer svc-000.$DOMAIN A on 127.0.0.1:${port[$t]} within ~60s (log above); TARGETS=ceiling runs the ceiling alone"
}

echo "== building into $work/bin"
mkdir -p "$work/bin"
go build -o "$work/bin/dnsceiling" ./e2e/bench/dnsceiling
go build -o "$work/bin/gendns" ./e2e/bench/gendns
go build -o "$work/bin/dnsmix" ./e2e/bench/dnsmix
if [[ " ${targets[*]} " == *" spillway "* ]]; then
  go build -o "$work/bin/spillway" ./cmd/spillway
fi

"$work/bin/gendns" --seed "$SEED" --domain "$DOMAIN" --bufsize "$BUFSIZE" \
  --services "$work/services.yaml" --queries "$work/queries.txt" --queries-bin "$work/queries.bin"

for t in "${targets[@]}"; do
  case "$t" in
    spillway) port[$t]=${SPILLWAY_PORT:-$(free_port)} ;;
    ceiling) port[$t]=${CEILING_PORT:-$(free_port)} ;;
  esac
  [[ ${port[$t]} =~ ^[0-9]+$ ]] || die "bad port ${port[$t]} for $t"
  case "$t" in
    spillway)
      "$work/bin/spillway" --dns-addr "127.0.0.1:${port[$t]}" --static-file "$work/services.yaml" \
        --data-dir "" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --domain "$DOMAIN" \
        >"$work/$t.log" 2>&1 &
      ;;
    ceiling)
      "$work/bin/dnsceiling" --addr "127.0.0.1:${port[$t]}" --static-file "$work/services.yaml" \
        --domain "$DOMAIN" >"$work/$t.log" 2>&1 &
      ;;
  esac
  pid[$t]=$!
done
for t in "${targets[@]}"; do
  wait_ready "$t"
  echo "== $t answers on 127.0.0.1:${port[$t]} (pid ${pid[$t]})"
done

flags=(-m udp -B -d "$work/queries.bin" -c "$CLIENTS" -T "$THREADS" -q "$OUTSTANDING" -t 1)
echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== dnsperf $(dnsperf -h 2>&1 | sed -n 's/^Version //p') flags: -s 127.0.0.1 -p PORT -l $SECONDS_PER_ROUND ${flags[*]/#$work\//}"
echo "   (queries.bin: $(grep -c . "$work/queries.txt") queries with EDNS0 UDP size $BUFSIZE; dnsperf -e would advertise 4096)"

echo
echo "== how each server answers the mix (dnsmix, once per distinct query)"
mix_args=()
for t in "${targets[@]}"; do mix_args+=(--server "$t=127.0.0.1:${port[$t]}"); done
mix_rc=0
timeout 120 "$work/bin/dnsmix" --queries "$work/queries.txt" --bufsize "$BUFSIZE" "${mix_args[@]}" || mix_rc=$?

# run_dnsperf TARGET SECONDS OUTFILE
run_dnsperf() {
  local t=$1 secs=$2 out=$3
  timeout $((secs + 30)) dnsperf -s 127.0.0.1 -p "${port[$t]}" -l "$secs" "${flags[@]}" -W >"$out" 2>&1 ||
    { cat "$out" >&2; die "dnsperf against $t failed"; }
}

if [ "$WARMUP_SECONDS" -gt 0 ]; then
  echo
  echo "== warm-up: ${WARMUP_SECONDS}s per target"
  for t in "${targets[@]}"; do run_dnsperf "$t" "$WARMUP_SECONDS" "$work/warmup-$t.txt"; done
fi

echo
echo "== $ROUNDS rounds x ${SECONDS_PER_ROUND}s per target, order alternating"
results="$work/results.tsv"
: >"$results"
for r in $(seq 1 "$ROUNDS"); do
  order=("${targets[@]}")
  if [ $((r % 2)) -eq 0 ] && [ "${#targets[@]}" -eq 2 ]; then order=("${targets[1]}" "${targets[0]}"); fi
  for t in "${order[@]}"; do
    out="$work/dnsperf-$t-$r.txt"
    run_dnsperf "$t" "$SECONDS_PER_ROUND" "$out"
    # One line: target round qps avg_ms max_ms sent lost noerror nxdomain other resp_bytes
    awk -v t="$t" -v r="$r" '
      /Queries sent:/ { sent = $3 }
      /Queries lost:/ { lost = $3 }
      /Response codes:/ {
        sub(/.*Response codes: */, "")
        n = split($0, parts, /, */)
        for (i = 1; i <= n; i++) {
          split(parts[i], f, " ")
          if (f[1] == "NOERROR") noerr = f[2]; else if (f[1] == "NXDOMAIN") nx = f[2]; else other += f[2]
        }
      }
      /Average packet size:/ { resp = $NF }
      /Queries per second:/ { qps = $4 }
      /Average Latency/ { avg = $4 * 1000; max = $8; sub(/\)/, "", max); max *= 1000 }
      END {
        if (qps == "") exit 1
        printf "%s\t%d\t%.0f\t%.3f\t%.3f\t%d\t%d\t%d\t%d\t%d\t%d\n", t, r, qps, avg, max, sent, lost, noerr, nx, other, resp
      }' "$out" >>"$results" || { cat "$out" >&2; die "cannot parse dnsperf output for $t round $r"; }
    tail -n 1 "$results" | awk -F'\t' '{ printf "   round %d %-9s %8d qps  avg %.3f ms  max %.3f ms  lost %d\n", $2, $1, $3, $4, $5, $7 }'
  done
done

echo
echo "== results"
awk -F'\t' '
  BEGIN { printf "%-6s %-9s %9s %8s %8s %9s %6s %9s %9s %6s %7s\n", "round", "target", "QPS", "avg ms", "max ms", "sent", "lost", "NOERROR", "NXDOMAIN", "other", "resp B" }
  { printf "%-6d %-9s %9d %8.3f %8.3f %9d %6d %9d %9d %6d %7d\n", $2, $1, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' "$results"

echo
awk -F'\t' '
  function median(list,    a, n, i, j, x) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { qps[$1] = qps[$1] " " $3; avg[$1] = avg[$1] " " $4; if ($5 > max[$1]) max[$1] = $5; lost[$1] += $7; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  END {
    printf "%-9s %11s %14s %13s %6s\n", "target", "median QPS", "median avg ms", "worst max ms", "lost"
    for (i = 1; i <= n; i++) { t = order[i]; m[t] = median(qps[t]); printf "%-9s %11d %14.3f %13.3f %6d\n", t, m[t], median(avg[t]), max[t], lost[t] }
    if (("spillway" in m) && ("ceiling" in m) && m["ceiling"] > 0)
      printf "\nratio spillway/ceiling (median QPS): %.2f\n", m["spillway"] / m["ceiling"]
  }' "$results"
echo "(at saturation the average latency is about OUTSTANDING/QPS; compare QPS first)"
echo "(load average now $(cut -d' ' -f1-3 /proc/loadavg); both servers share the machine with dnsperf and anything else running)"

if [ "$mix_rc" -ne 0 ]; then
  echo
  echo "WARNING: dnsmix found failed or differing answers (see above); the QPS comparison is not like for like" >&2
  exit 1
fi
