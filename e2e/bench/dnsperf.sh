#!/usr/bin/env bash
# Side-by-side DNS benchmark: spillway's resolver against the ceiling, a
# minimal miekg/dns server answering the same records from a static map
# (e2e/bench/dnsceiling), and CoreDNS's file plugin serving the same records
# from a zone file (written by dnsceiling --write-zone) if COREDNS is set.
# All load the same services file (100 services, 3-20 endpoints each, from
# e2e/bench/gendns) and get the same query mix (70% SRV, 25% A, 5% NXDOMAIN)
# from dnsperf on loopback, in rounds whose order rotates. Two phases:
#
#   1. saturation: dnsperf as fast as it goes; QPS and latency. On 2 cores
#      dnsperf itself takes about one core, so QPS is bounded by the load
#      generator as much as by the server.
#   2. CPU per query: dnsperf -Q RATE (a fixed offered rate every target
#      keeps up with) for CPU_SECONDS; the server's utime+stime
#      (/proc/PID/stat) over the run divided by the queries answered, in µs
#      ("gross"), and the same less the server's idle CPU (measured over
#      IDLE_SECONDS with no queries first; "net"). dnsperf's own CPU and
#      every other process's (from /proc/PID/stat) are shown per run, so a
#      noisy run shows.
#
# It also prints how each server answered the mix (response codes,
# truncation, reply sizes, and whether the full answers agree with
# spillway's) and the ratios to spillway of the medians.
#
# spillway runs in up to three setups, each a target of its own (its own
# process and port), so they alternate in the rounds like the others:
#
#   spillway           --dns-rrl-rate 0 --dns-cookies=false: no rate limit,
#                      no cookies (the defaults before issue 28 item 6), so
#                      its figures compare with earlier runs
#   spillway-cookie    the default start (RRL at 1,000/s per /24, cookies),
#                      and dnsperf sends a valid server cookie with every
#                      query, as a cookie-speaking resolver does: it is
#                      learned with dig +cookie from 127.0.0.1 (dnsperf's
#                      address) before each run and added to every query
#                      of queries.bin, so RRL lets it all through
#   spillway-nocookie  the default start, no cookie: dnsperf from one
#                      address is past the rate, gets 1,000 full answers a
#                      second and TC replies for the rest
#
# The cookie setups print the server's cookie and RRL counters after the
# runs (from /metrics, with curl).
#
# Run from the repository root:
#
#   bash e2e/bench/dnsperf.sh
#   COREDNS=/tmp/coredns/coredns bash e2e/bench/dnsperf.sh
#
# CoreDNS is not packaged in Debian. Build a binary with the file plugin
# (nothing is installed or committed):
#
#   git clone --depth 1 https://github.com/coredns/coredns /tmp/coredns
#   cd /tmp/coredns && go build -o coredns .          # every plugin, or:
#   # or a minimal build: a main package (e.g. cmd/minimal/main.go in that
#   # tree) importing coremain, plugin/bind, plugin/errors and plugin/file,
#   # with dnsserver.Directives = []string{"bind", "errors", "file"}
#
#
# Environment (all optional):
#   ROUNDS=3              measured rounds; each runs every target once
#   SECONDS_PER_ROUND=10  dnsperf -l of one measured run
#   WARMUP_SECONDS=2      unmeasured dnsperf run per target before round 1 (0: none)
#   TARGETS="spillway ceiling coredns"  which servers to run (coredns only if COREDNS is set;
#                         also spillway-cookie, spillway-nocookie: see above)
#   COREDNS=PATH          a CoreDNS binary with the file plugin (see above)
#   RATE=5000             dnsperf -Q of the CPU phase, queries per second
#   CPU_SECONDS=10        dnsperf -l of one CPU-phase run (0: skip the phase)
#   IDLE_SECONDS=5        each server's idle CPU is measured over this long first
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
COREDNS=${COREDNS:-}
TARGETS=${TARGETS:-"spillway ceiling${COREDNS:+ coredns}"}
RATE=${RATE:-5000}
CPU_SECONDS=${CPU_SECONDS:-10}
IDLE_SECONDS=${IDLE_SECONDS:-5}
CLIENTS=${CLIENTS:-4}
THREADS=${THREADS:-2}
OUTSTANDING=${OUTSTANDING:-100}
SEED=${SEED:-1}
KEEP=${KEEP:-}
if [ -n "$KEEP" ] && [[ $KEEP != /* ]]; then KEEP="$PWD/$KEEP"; fi
DOMAIN=spillway.internal.
BUFSIZE=1232

die() { echo "dnsperf.sh: $*" >&2; exit 1; }

for v in ROUNDS SECONDS_PER_ROUND WARMUP_SECONDS CLIENTS THREADS OUTSTANDING SEED RATE CPU_SECONDS IDLE_SECONDS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v=${!v}: want a whole number"
done
[ "$ROUNDS" -ge 1 ] && [ "$SECONDS_PER_ROUND" -ge 1 ] || die "ROUNDS and SECONDS_PER_ROUND must be at least 1"
targets=()
for t in $TARGETS; do
  case "$t" in
    spillway|spillway-cookie|spillway-nocookie|ceiling) targets+=("$t") ;;
    coredns)
      [ -n "$COREDNS" ] || die "TARGETS has coredns but COREDNS is not set (see the build note at the top of $0)"
      [ -x "$COREDNS" ] || die "COREDNS=$COREDNS is not an executable"
      "$COREDNS" -plugins 2>/dev/null | grep -Eq '^ *(dns\.)?file$' ||
        die "COREDNS=$COREDNS has no file plugin ($COREDNS -plugins)"
      targets+=("$t") ;;
    *) die "TARGETS: unknown target $t (want spillway, spillway-cookie, spillway-nocookie, ceiling and/or coredns)" ;;
  esac
done
[ "${#targets[@]}" -ge 1 ] || die "TARGETS is empty"
for tool in go dnsperf dig ss timeout perl; do
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
if [[ " ${targets[*]} " == *" spillway"* ]]; then
  go build -o "$work/bin/spillway" ./cmd/spillway
fi

"$work/bin/gendns" --seed "$SEED" --domain "$DOMAIN" --bufsize "$BUFSIZE" \
  --services "$work/services.yaml" --queries "$work/queries.txt" --queries-bin "$work/queries.bin"
"$work/bin/dnsceiling" --static-file "$work/services.yaml" --domain "$DOMAIN" --write-zone "$work/zone.db"

declare -A http=()
for t in "${targets[@]}"; do
  case "$t" in
    spillway) port[$t]=${SPILLWAY_PORT:-$(free_port)} ;;
    ceiling) port[$t]=${CEILING_PORT:-$(free_port)} ;;
    *) port[$t]=$(free_port) ;;
  esac
  [[ ${port[$t]} =~ ^[0-9]+$ ]] || die "bad port ${port[$t]} for $t"
  case "$t" in
    spillway*)
      setup=()
      [ "$t" = spillway ] && setup=(--dns-rrl-rate 0 --dns-cookies=false)
      http[$t]=$(free_port)
      "$work/bin/spillway" --dns-addr "127.0.0.1:${port[$t]}" --static-file "$work/services.yaml" \
        --data-dir "" --grpc-addr 127.0.0.1:0 --http-addr "127.0.0.1:${http[$t]}" --domain "$DOMAIN" "${setup[@]}" \
        >"$work/$t.log" 2>&1 &
      ;;
    ceiling)
      "$work/bin/dnsceiling" --addr "127.0.0.1:${port[$t]}" --static-file "$work/services.yaml" \
        --domain "$DOMAIN" >"$work/$t.log" 2>&1 &
      ;;
    coredns)
      printf '%s:%s {\n    bind 127.0.0.1\n    errors\n    file %s\n}\n' "$DOMAIN" "${port[$t]}" "$work/zone.db" >"$work/Corefile"
      "$COREDNS" -conf "$work/Corefile" -quiet >"$work/$t.log" 2>&1 &
      ;;
  esac
  pid[$t]=$!
done
for t in "${targets[@]}"; do
  wait_ready "$t"
  echo "== $t answers on 127.0.0.1:${port[$t]} (pid ${pid[$t]})"
done

flags=(-m udp -B -c "$CLIENTS" -T "$THREADS" -q "$OUTSTANDING" -t 1)
echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "== dnsperf $(dnsperf -h 2>&1 | sed -n 's/^Version //p') flags: -s 127.0.0.1 -p PORT -l $SECONDS_PER_ROUND -d queries.bin ${flags[*]} (spillway-cookie: -d queries-cookie.bin)"
echo "   (queries.bin: $(grep -c . "$work/queries.txt") queries with EDNS0 UDP size $BUFSIZE; dnsperf -e would advertise 4096)"
if [ -n "$COREDNS" ]; then echo "== coredns: $COREDNS ($("$COREDNS" -version 2>/dev/null | head -n 1)), Corefile: errors + file zone.db"; fi

echo
echo "== how each server answers the mix (dnsmix, once per distinct query; the spillway-* setups answer as spillway)"
mix_args=()
for t in "${targets[@]}"; do
  case "$t" in spillway|ceiling) mix_args+=(--server "$t=127.0.0.1:${port[$t]}") ;; esac
done
[ "${#mix_args[@]}" -gt 0 ] || mix_args=(--server "${targets[0]}=127.0.0.1:${port[${targets[0]}]}")
mix_rc=0
timeout 120 "$work/bin/dnsmix" --queries "$work/queries.txt" --bufsize "$BUFSIZE" "${mix_args[@]}" || mix_rc=$?
if [[ " ${targets[*]} " == *" coredns "* ]]; then
  echo
  echo "== coredns against ${mix_args[1]#--server } (informational: CoreDNS adds the zone's NS to the authority section)"
  timeout 120 "$work/bin/dnsmix" --queries "$work/queries.txt" --bufsize "$BUFSIZE" "${mix_args[0]}" "${mix_args[1]}" \
    --server "coredns=127.0.0.1:${port[coredns]}" | grep -v '^ ' ||
    echo "   (coredns answers differ from spillway's, as counted above; not an error)"
fi

# cookie_queries TARGET writes $work/queries-cookie.bin: queries.bin with
# a COOKIE option in each query's OPT record, the client cookie and the
# server cookie that TARGET gives dig +cookie from 127.0.0.1 now (valid
# for an hour, so it is learned again before every run).
cookie_queries() {
  local t=$1 ck
  ck=$(dig +cookie +norec +time=2 +tries=3 -b 127.0.0.1 @127.0.0.1 -p "${port[$t]}" "svc-000.$DOMAIN" A |
    sed -n 's/^; COOKIE: \([0-9a-f]\{48\}\) (good)$/\1/p')
  [[ $ck =~ ^[0-9a-f]{48}$ ]] || die "$t gave dig no server cookie"
  # Each query ends with an OPT record without options (gendns): give its
  # RDATA the COOKIE option (code 10, 24 bytes).
  perl -e '
    my $ck = pack("H*", shift); local $/; binmode STDIN; binmode STDOUT;
    my $in = <STDIN>; my ($out, $n) = ("", 0);
    while (length $in) {
      my $len = unpack("n", substr($in, 0, 2, ""));
      my $m = substr($in, 0, $len, "");
      (substr($m, -11, 3) eq "\x00\x00\x29" && substr($m, -2) eq "\x00\x00") or die "query $n: no empty OPT record at its end\n";
      $m = substr($m, 0, -2) . pack("nnn", 4 + length $ck, 10, length $ck) . $ck;
      $out .= pack("n", length $m) . $m; $n++;
    }
    print $out;' "$ck" <"$work/queries.bin" >"$work/queries-cookie.bin" || die "cannot add the cookie to queries.bin"
}

# prepare TARGET: what a run against TARGET needs first (spillway-cookie:
# a fresh cookie in queries-cookie.bin), outside the measured time.
prepare() { if [ "$1" = spillway-cookie ]; then cookie_queries "$1"; fi; }

# run_dnsperf TARGET SECONDS OUTFILE [extra dnsperf flags] (after prepare)
run_dnsperf() {
  local t=$1 secs=$2 out=$3 data=(-d "$work/queries.bin")
  shift 3
  [ "$t" = spillway-cookie ] && data=(-d "$work/queries-cookie.bin")
  timeout $((secs + 30)) dnsperf -s 127.0.0.1 -p "${port[$t]}" -l "$secs" "${flags[@]}" "${data[@]}" "$@" -W >"$out" 2>&1 ||
    { cat "$out" >&2; die "dnsperf against $t failed"; }
}

# cpu_ticks PID prints utime+stime of PID in clock ticks.
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

# child_ticks prints the CPU ticks of this shell's reaped children (dnsperf, via timeout).
child_ticks() { awk '{ sub(/.*\) /, ""); print $14 + $15 }' "/proc/$$/stat"; }

# proc_snapshot FILE writes "pid ticks" for every process: utime+stime (not
# cutime: a process reaping a long-lived child adds all of the child's CPU
# at once). /proc/stat is no help on the benchmark VM: its busy ticks
# showed less CPU than the server alone used.
proc_snapshot() {
  { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk '{ pid = $1; sub(/.*\) /, ""); print pid, $12 + $13 }' >"$1"
}

# others_ticks BEFORE AFTER PID... prints the ticks every process but PID...
# used between the two snapshots (a new process counts whole; one that ended
# in between is missed, so this is a floor).
others_ticks() {
  local a=$1 b=$2
  shift 2
  awk -v ex=" $* " 'NR == FNR { v[$1] = $2; next } index(ex, " " $1 " ") == 0 { d = $2 - v[$1]; if (d > 0) s += d } END { print s + 0 }' "$a" "$b"
}

# rotate ROUND: the targets in the order of that round (rotated by one each round).
rotate() {
  local r=$1 n=${#targets[@]} i
  for ((i = 0; i < n; i++)); do echo "${targets[$(((i + r - 1) % n))]}"; done
}

if [ "$WARMUP_SECONDS" -gt 0 ]; then
  echo
  echo "== warm-up: ${WARMUP_SECONDS}s per target"
  for t in "${targets[@]}"; do prepare "$t" && run_dnsperf "$t" "$WARMUP_SECONDS" "$work/warmup-$t.txt"; done
fi

echo
echo "== saturation: $ROUNDS rounds x ${SECONDS_PER_ROUND}s per target, order rotating"
results="$work/results.tsv"
: >"$results"
for r in $(seq 1 "$ROUNDS"); do
  for t in $(rotate "$r"); do
    out="$work/dnsperf-$t-$r.txt"
    prepare "$t"
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

cpu_results="$work/cpu.tsv"
: >"$cpu_results"
if [ "$CPU_SECONDS" -gt 0 ]; then
  echo
  echo "== CPU per query: dnsperf -Q $RATE for ${CPU_SECONDS}s per target, $ROUNDS rounds, order rotating"
  hz=$(getconf CLK_TCK)
  echo "   idle first: each server's own CPU over ${IDLE_SECONDS}s with no queries"
  declare -A idle=()
  for t in "${targets[@]}"; do
    c0=$(cpu_ticks "${pid[$t]}")
    sleep "$IDLE_SECONDS"
    c1=$(cpu_ticks "${pid[$t]}")
    idle[$t]=$(echo "scale=4; ($c1 - $c0) / $hz / $IDLE_SECONDS" | bc)
    printf '   idle %-9s %.1f ms of CPU per second\n' "$t" "$(echo "${idle[$t]} * 1000" | bc)"
  done
  for r in $(seq 1 "$ROUNDS"); do
    for t in $(rotate "$r"); do
      out="$work/dnsperf-cpu-$t-$r.txt"
      prepare "$t"
      proc_snapshot "$work/procs0"
      c0=$(cpu_ticks "${pid[$t]}") k0=$(child_ticks) t0=$(date +%s.%N)
      run_dnsperf "$t" "$CPU_SECONDS" "$out" -Q "$RATE"
      c1=$(cpu_ticks "${pid[$t]}") k1=$(child_ticks) t1=$(date +%s.%N)
      proc_snapshot "$work/procs1"
      o=$(others_ticks "$work/procs0" "$work/procs1" "${pid[$t]}")
      # One line: target round completed lost achieved_qps server_cpu_s others_cpu_s wall_s dnsperf_cpu_s idle_cores
      awk -v t="$t" -v r="$r" -v c=$((c1 - c0)) -v k=$((k1 - k0)) -v hz="$hz" -v o="$o" \
        -v wall="$(echo "$t1 - $t0" | bc)" -v idle="${idle[$t]}" '
        /Queries completed:/ { done = $3 }
        /Queries lost:/ { lost = $3 }
        /Queries per second:/ { qps = $4 }
        END {
          if (done == "") exit 1
          printf "%s\t%d\t%d\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.4f\n", t, r, done, lost, qps, c / hz, o / hz, wall, k / hz, idle
        }' "$out" >>"$cpu_results" || { cat "$out" >&2; die "cannot parse dnsperf output for $t CPU round $r"; }
      tail -n 1 "$cpu_results" | awk -F'\t' '{ n = ($3 > 0 ? $3 : 1); printf "   round %d %-9s %8d answered (%d lost) at %d qps: server CPU %.2f s = %.1f us/query (net of idle %.1f); dnsperf %.2f cores; other processes %.2f cores\n", $2, $1, $3, $4, $5, $6, $6 * 1e6 / n, ($6 - $10 * $8) * 1e6 / n, $9 / $8, $7 / $8 }'
    done
  done
fi

echo
echo "== results"
awk -F'\t' '
  BEGIN { printf "%-6s %-9s %9s %8s %8s %9s %6s %9s %9s %6s %7s\n", "round", "target", "QPS", "avg ms", "max ms", "sent", "lost", "NOERROR", "NXDOMAIN", "other", "resp B" }
  { printf "%-6d %-9s %9d %8.3f %8.3f %9d %6d %9d %9d %6d %7d\n", $2, $1, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' "$results"

echo
echo "(markdown, medians over the rounds; CPU at dnsperf -Q $RATE, ${CPU_SECONDS}s per run)"
awk -F'\t' -v rate="$RATE" '
  function median(list,    a, n, i, j, x) {
    n = split(list, a, " ")
    if (n == 0) return 0
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  FNR == 1 { file++ }
  file == 1 { qps[$1] = qps[$1] " " $3; avg[$1] = avg[$1] " " $4; if ($5 > max[$1]) max[$1] = $5; lost[$1] += $7; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  file == 2 {
    q = ($3 > 0 ? $3 : 1)
    us[$1] = us[$1] " " ($6 * 1e6 / q); net[$1] = net[$1] " " (($6 - $10 * $8) * 1e6 / q); idlems[$1] = $10 * 1000
    clost[$1] += $4; cqps[$1] = cqps[$1] " " $5; perf[$1] = perf[$1] " " ($9 / $8); other[$1] = other[$1] " " ($7 / $8)
  }
  END {
    print "| target | median QPS (saturation) | median avg latency ms | worst max latency ms | lost | CPU us/query at " rate " qps (gross) | net of idle | idle server CPU ms/s | achieved qps | lost | dnsperf cores | other processes, cores |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for (i = 1; i <= n; i++) {
      t = order[i]; m[t] = median(qps[t]); u[t] = median(us[t])
      if (t in us) cpu = sprintf("%.1f | %.1f | %.1f | %d | %d | %.2f | %.2f", u[t], median(net[t]), idlems[t], median(cqps[t]), clost[t], median(perf[t]), median(other[t]))
      else cpu = "- | - | - | - | - | - | -"
      printf "| %s | %d | %.2f | %.1f | %d | %s |\n", t, m[t], median(avg[t]), max[t], lost[t], cpu
    }
    print ""
    for (i = 1; i <= n; i++) {
      t = order[i]
      if (t == "spillway" || !(t in m)) continue
      if (m[t] > 0) printf "ratio spillway/%s: QPS %.2f", t, m["spillway"] / m[t]
      if ((t in u) && u["spillway"] > 0) printf ", CPU per query %.2f (%s uses %.2fx spillway'"'"'s CPU per query)", u["spillway"] / u[t], t, u[t] / u["spillway"]
      printf "\n"
    }
  }' "$results" "$cpu_results"
echo "(at saturation the average latency is about OUTSTANDING/QPS; dnsperf shares the cores, so compare CPU per query first)"
for t in "${targets[@]}"; do
  case "$t" in spillway-*) ;; *) continue ;; esac
  if command -v curl >/dev/null 2>&1; then
    echo "== $t counters: $(curl -fsS --max-time 5 "http://127.0.0.1:${http[$t]}/metrics" |
      grep -E '^spillway_dns_(cookies_total|rrl_(exempt|slipped|dropped)_total)' | tr '\n' ' ')"
  else
    echo "== $t counters: (no curl)"
  fi
done
echo "(load average now $(cut -d' ' -f1-3 /proc/loadavg); the servers share the machine with dnsperf and anything else running)"

if [ "$mix_rc" -ne 0 ]; then
  echo
  echo "WARNING: dnsmix found failed or differing answers between spillway and the ceiling (see above); the comparison is not like for like" >&2
  exit 1
fi
