#!/usr/bin/env bash
# jaeger.sh: a real trace backend for the telemetry e2e test: Jaeger (v2, all-in-one with
# in-memory storage), built from the Go module proxy into a cache, kept out of the main
# module (this directory is a module of its own that only names the tool).
#
#   jaeger.sh build            build once into $JAEGER_BIN (idempotent)
#   jaeger.sh start DIR        start on free loopback ports, state and log in DIR; prints env lines
#   jaeger.sh stop DIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
version=v1.76.0
cache=${RECORDIO_BRIDGE_CACHE:-$HOME/.cache/recordio-bridge}
JAEGER_BIN=${JAEGER_BIN:-$cache/jaeger-$version}

build() {
  if [[ -x $JAEGER_BIN ]]; then return 0; fi
  mkdir -p "$cache"
  echo "jaeger.sh: building Jaeger $version from the Go module proxy (first time only, a few minutes)" >&2
  go mod download github.com/jaegertracing/jaeger
  CGO_ENABLED=0 go build -trimpath -o "$JAEGER_BIN.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
  mv "$JAEGER_BIN.tmp" "$JAEGER_BIN"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

start() {
  local dir=$1
  build
  mkdir -p "$dir"
  local grpc http query health
  grpc=$(free_port); http=$(free_port); query=$(free_port); health=$(free_port)
  cat > "$dir/jaeger.yaml" <<YAML
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:$query
    grpc:
      endpoint: 127.0.0.1:$(free_port)
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:$health
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:$grpc
      http:
        endpoint: 127.0.0.1:$http
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
YAML
  "$JAEGER_BIN" --config "$dir/jaeger.yaml" > "$dir/jaeger.log" 2>&1 &
  echo $! > "$dir/jaeger.pid"
  for _ in $(seq 1 150); do
    if curl -sf "http://127.0.0.1:$query/api/services" > /dev/null; then
      echo "JAEGER_OTLP_GRPC=127.0.0.1:$grpc"
      echo "JAEGER_OTLP_HTTP=127.0.0.1:$http"
      echo "JAEGER_QUERY=http://127.0.0.1:$query"
      return 0
    fi
    if ! kill -0 "$(cat "$dir/jaeger.pid")" 2>/dev/null; then
      echo "jaeger.sh: Jaeger exited:" >&2; cat "$dir/jaeger.log" >&2; return 1
    fi
    sleep 0.2
  done
  echo "jaeger.sh: Jaeger not answering after 30 s" >&2; cat "$dir/jaeger.log" >&2; return 1
}

stop() {
  local dir=$1
  if [[ -f $dir/jaeger.pid ]]; then
    kill "$(cat "$dir/jaeger.pid")" 2>/dev/null || true
    rm -f "$dir/jaeger.pid"
  fi
}

case ${1:-} in
  build) build ;;
  start) start "${2:?usage: jaeger.sh start DIR}" ;;
  stop) stop "${2:?usage: jaeger.sh stop DIR}" ;;
  *) echo "usage: jaeger.sh build | start DIR | stop DIR" >&2; exit 2 ;;
esac
