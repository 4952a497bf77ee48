#!/usr/bin/env bash
# all.sh BIN: run every side-by-side benchmark (the bridge against what a user would pick
# instead of it) on the one broker at PULSAR_URL, each's own tables on stderr, then print
# one table of their ratios on stdout. make bench runs it on a broker of its own.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: all.sh BIN (the bridge binary)" >&2; exit 2; }
bin=$1
: "${PULSAR_URL:?set PULSAR_URL (make bench starts a broker)}"
cd "$(dirname "${BASH_SOURCE[0]}")"
out=$(mktemp -d "${TMPDIR:-/tmp}/bench-all-XXXXXX")
trap 'rm -rf "$out"' EXIT

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "load average (1, 5, 15 min) before: $(load)" >&2
run() { # run NAME ARGS...: one benchmark, its output kept for the table
  local name=$1; shift
  echo "== $name $* (load $(load))" >&2
  go run "./$name" "$@" | tee "$out/$name.md" >&2
}
run producer -rounds "${ROUNDS:-5}"
run consumer -rounds "${ROUNDS:-2}"
run ingress -bin "$bin" -rounds "${ROUNDS:-5}" -n "${INGRESS_RECORDS:-200000}"
run named -bin "$bin" -rounds "${ROUNDS:-3}"
run egress -bin "$bin" -rounds "${ROUNDS:-3}"
run latency -bin "$bin" -rounds "${LATENCY_ROUNDS:-3}" -duration "${LATENCY_DURATION:-10s}"
echo "load average after: $(load)" >&2

# Every benchmark prints its ratio rows in its own columns; they are gathered here.
trim='function t(x) { gsub(/^ +| +$/, "", x); gsub(/\*/, "", x); return x } '
echo "| benchmark | size or rate | bridge against | throughput | CPU per record | latency |"
echo "|---|---|---|---|---|---|"
awk -F'|' "$trim"'/^\| ratio bridge\/official/ {printf "| producer | %s | official client | %s | %s | |\n", t($3), t($5), t($9)}' "$out/producer.md"
awk -F'|' "$trim"'/^\| ratio bridge\/official/ {printf "| consumer | %s | official consumer | %s | %s | |\n", t($3), t($5), t($7)}' "$out/consumer.md"
awk -F'|' "$trim"'/^\| ratio bridge\/official/ {printf "| ingress | %s | official client | %s | | |\n", t($3), t($5)}' "$out/ingress.md"
awk -F'|' "$trim"'/named\/unnamed/ {printf "| named ingress | 1 KiB | unnamed streams | %s | | |\n", t($3)}' "$out/named.md"
awk -F'|' "$trim"'/^\| ratio bridge\/official/ {printf "| egress | %s | official consumer | %s | %s | |\n", t($3), t($5), t($7)}' "$out/egress.md"
awk -F'|' "$trim"'/^\| bridge - websocket/ {printf "| receipt latency | %s | WebSocket producer | | | p50 %s, p99.9 %s |\n", t($3), t($5), t($8)}' "$out/latency.md"
