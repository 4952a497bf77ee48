#!/usr/bin/env bash
# demo.sh: the bridge's main job end to end on a local Apache Pulsar standalone broker:
# Mesos-style scheduler events POSTed as a RecordIO stream, routed by type into three
# topics, receipted per record, read back with the official client, and streamed back
# out of the bridge as RecordIO (egress).
# The broker is left running for exploration; `make broker-stop` stops it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pulsar=e2e/pulsar/pulsar.sh

"$pulsar" start
eval "$("$pulsar" env)"
run="demo-$(date +%Y%m%d-%H%M%S)"
dir=$(mktemp -d)
data_port=${BRIDGE_DEMO_PORT:-18080}
ops_port=$((data_port + 1))
cat > "$dir/bridge.yaml" <<YAML
listen:
  data: 127.0.0.1:$data_port
  ops: 127.0.0.1:$ops_port
pulsar:
  url: $PULSAR_URL
routes:
  - name: mesos
    namespaces: [public/default]
    headers: [X-Framework-Id]
    properties:
      source: scheduler
      eventType: "{json:type}"
    rules:
      - match: {json: {type: UPDATE}}
        topic: $run-tasks
        key: "{json:update.status.task_id.value}"
      - match: {json: {type: FAILURE}}
        topic: $run-tasks
      - match: {json: {type: HEARTBEAT}}
        topic: $run-heartbeats
    default:
      topic: $run-events
streams:
  - name: tasks
    topics: [$run-tasks]
    position: earliest
    overrides: [envelope, subscription]
    heartbeatInterval: 2s
    heartbeat: '{"type":"HEARTBEAT"}'
YAML
echo
echo "== bridge configuration ($dir/bridge.yaml)"
sed -n '/^routes:/,$p' "$dir/bridge.yaml"
bin/bridge validate -config "$dir/bridge.yaml"
bin/bridge run -config "$dir/bridge.yaml" -log-level warn 2> "$dir/bridge.log" &
bridge_pid=$!
trap 'kill -TERM $bridge_pid 2>/dev/null; wait $bridge_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$ops_port/readyz" > /dev/null && break
  if ! kill -0 $bridge_pid 2>/dev/null; then
    echo "demo: the bridge did not start (ports $data_port/$ops_port taken? set BRIDGE_DEMO_PORT):" >&2
    cat "$dir/bridge.log" >&2
    exit 1
  fi
  sleep 0.1
done
echo "readyz: $(curl -s "http://127.0.0.1:$ops_port/readyz")"
echo
(cd e2e && go run ./cmd/demo -bridge "http://127.0.0.1:$data_port" -pulsar "$PULSAR_URL" -topics "persistent://public/default/$run")
echo
echo "== GET http://127.0.0.1:$data_port/v1/streams/tasks: the tasks topic streamed back out as RecordIO (3 s)"
curl -s -N --max-time 3 -H 'Accept: application/recordio' "http://127.0.0.1:$data_port/v1/streams/tasks" || true
echo
echo
echo "== the same on another subscription with the JSON envelope (?subscription=demo-json&envelope=json)"
curl -s -N --max-time 3 -H 'Accept: application/recordio' "http://127.0.0.1:$data_port/v1/streams/tasks?subscription=demo-json&envelope=json" || true
echo
echo
echo "== bridge metrics (http://127.0.0.1:$ops_port/metrics)"
curl -s "http://127.0.0.1:$ops_port/metrics" | grep -E '^bridge_ingress_(records|streams)_total|^bridge_ingress_publish_duration_seconds_count'
echo
echo "The broker keeps running at $PULSAR_URL (admin $PULSAR_ADMIN_URL); stop it with: make broker-stop"
