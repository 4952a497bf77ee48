#!/usr/bin/env bash
# with-broker.sh CMD [ARGS...]: start one Apache Pulsar standalone broker on free loopback
# ports in a fresh state directory, run CMD with PULSAR_URL, PULSAR_ADMIN_URL and
# PULSAR_STATE_DIR exported (so fault tests can kill -9 and restart it), then stop the
# broker and remove its state, whatever CMD's outcome. Exits with CMD's status.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -gt 0 ] || { echo "usage: with-broker.sh CMD [ARGS...]" >&2; exit 2; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # free_port START: the first port from START on that nothing listens on and that is not taken yet
  local p=$1
  while port_busy "$p" || [[ " $taken " == *" $p "* ]]; do p=$((p + 1)); done
  echo "$p"
}

# pick_ports: five free ports from a random base between 20000 and 29999, so two suites started
# at the same moment rarely choose the same ones; pulsar.sh's start exits 75 when they did
# (another broker holds one), and the start is tried again on other ports.
pick_ports() {
  local base=$((20000 + RANDOM % 9000))
  taken=""
  PULSAR_BROKER_PORT=$(free_port "$base"); taken="$taken $PULSAR_BROKER_PORT"
  PULSAR_WEB_PORT=$(free_port $((base + 100))); taken="$taken $PULSAR_WEB_PORT"
  PULSAR_BOOKIE_PORT=$(free_port $((base + 200))); taken="$taken $PULSAR_BOOKIE_PORT"
  PULSAR_BROKER_TLS_PORT=$(free_port $((base + 300))); taken="$taken $PULSAR_BROKER_TLS_PORT"
  PULSAR_ZOOKEEPER_PORT=$(free_port $((base + 400)))
  export PULSAR_BROKER_PORT PULSAR_WEB_PORT PULSAR_BOOKIE_PORT PULSAR_BROKER_TLS_PORT PULSAR_ZOOKEEPER_PORT
}
PULSAR_STATE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/bridge-pulsar-XXXXXX")
export PULSAR_STATE_DIR

cleanup() {
  "$here/pulsar.sh" stop || true
  if [ -z "${KEEP_PULSAR_STATE:-}" ]; then rm -rf "$PULSAR_STATE_DIR"; else echo "with-broker.sh: broker state kept in $PULSAR_STATE_DIR" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for attempt in 1 2 3 4 5; do
  pick_ports
  set +e
  "$here/pulsar.sh" start
  status=$?
  set -e
  [ $status -eq 0 ] && break
  [ $status -eq 75 ] && [ $attempt -lt 5 ] || exit $status
  echo "with-broker.sh: ports taken by another process; starting again on other ports (attempt $((attempt + 1)) of 5)" >&2
  rm -rf "${PULSAR_STATE_DIR:?}"/data
done
eval "$("$here/pulsar.sh" env)"
set +e
"$@"
status=$?
set -e
if [ $status -ne 0 ]; then
  echo "with-broker.sh: '$*' exited $status; last broker log lines:" >&2
  tail -n 20 "$PULSAR_STATE_DIR/logs/pulsar-standalone.log" >&2 2>/dev/null || true
fi
exit $status
