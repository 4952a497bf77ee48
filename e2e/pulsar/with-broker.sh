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

taken=""
PULSAR_BROKER_PORT=$(free_port 26650); taken="$taken $PULSAR_BROKER_PORT"
PULSAR_WEB_PORT=$(free_port 28090); taken="$taken $PULSAR_WEB_PORT"
PULSAR_BOOKIE_PORT=$(free_port 23181); taken="$taken $PULSAR_BOOKIE_PORT"
PULSAR_BROKER_TLS_PORT=$(free_port 26651); taken="$taken $PULSAR_BROKER_TLS_PORT"
PULSAR_ZOOKEEPER_PORT=$(free_port 22181)
PULSAR_STATE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/bridge-pulsar-XXXXXX")
export PULSAR_BROKER_PORT PULSAR_WEB_PORT PULSAR_BOOKIE_PORT PULSAR_BROKER_TLS_PORT PULSAR_ZOOKEEPER_PORT PULSAR_STATE_DIR

cleanup() {
  "$here/pulsar.sh" stop || true
  if [ -z "${KEEP_PULSAR_STATE:-}" ]; then rm -rf "$PULSAR_STATE_DIR"; else echo "with-broker.sh: broker state kept in $PULSAR_STATE_DIR" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$here/pulsar.sh" start
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
