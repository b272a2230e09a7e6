#!/usr/bin/env bash
# Installs the OS packages the tests need, if they are missing. Each entry is
# "command:debian-package". The registry tests need none beyond Go and a C
# compiler for -race; the DNS tests need dig, kdig and dnsperf (e2e TestDNSRRL); the etcd storage
# tests start a real etcd server (Debian's etcd-server: /usr/bin/etcd); the
# browser tests of the web page (e2e TestUI*) drive Debian's chromium headless.
set -euo pipefail

need=(
  "gcc:gcc"
  "dig:bind9-dnsutils"
  "kdig:knot-dnsutils"
  "dnsperf:dnsperf"
  "etcd:etcd-server"
  "chromium:chromium"
  "dot:graphviz"
)

missing=()
for entry in "${need[@]}"; do
  cmd="${entry%%:*}" pkg="${entry#*:}"
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
echo "installing test dependencies: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
