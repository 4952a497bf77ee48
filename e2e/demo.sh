#!/usr/bin/env bash
# demo.sh: the bridge's main job end to end on a local Apache Pulsar standalone broker.
# The broker is left running for exploration; `make broker-stop` stops it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pulsar=e2e/pulsar/pulsar.sh

"$pulsar" start
eval "$("$pulsar" env)"
echo
echo "== a live Apache Pulsar broker"
echo "broker version: $(curl -sf "$PULSAR_ADMIN_URL/admin/v2/brokers/version")"
echo "clusters:       $(curl -sf "$PULSAR_ADMIN_URL/admin/v2/clusters")"
echo "namespaces:     $(curl -sf "$PULSAR_ADMIN_URL/admin/v2/namespaces/public")"
echo "health:         $(curl -sf "$PULSAR_ADMIN_URL/admin/v2/brokers/health")"
echo
echo "== the bridge"
bin/bridge version
echo
echo "Not built yet: ingress (RecordIO POST -> Pulsar), egress (Pulsar -> RecordIO GET)."
echo "The demo streams events through the bridge once those land."
echo
echo "The broker keeps running at $PULSAR_URL (admin $PULSAR_ADMIN_URL); stop it with: make broker-stop"
