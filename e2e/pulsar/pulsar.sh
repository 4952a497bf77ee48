#!/usr/bin/env bash
# pulsar.sh: fetch, start, stop, kill -9 and restart a real Apache Pulsar standalone broker
# for the bridge's tests, benchmarks and demo. No Docker: the server distribution is resolved
# from Maven Central with Maven and cached outside the repository.
#
#   pulsar.sh fetch     resolve and unpack the distribution (idempotent)
#   pulsar.sh start     fetch if needed, start in the background, wait until healthy
#   pulsar.sh stop      graceful stop (SIGTERM, then SIGKILL after 30 s), keeps the data
#   pulsar.sh kill      kill -9 (fault tests), keeps the data
#   pulsar.sh restart   kill -9 then start on the same data
#   pulsar.sh status    exit 0 when the broker answers, 1 otherwise
#   pulsar.sh env       print PULSAR_URL / PULSAR_ADMIN_URL / PULSAR_STATE_DIR as shell exports
#   pulsar.sh wipe      stop and delete the state directory
#
# Environment (all optional):
#   PULSAR_VERSION        default 4.0.8 (4.0 LTS); PULSAR_FALLBACK_VERSION (3.0 LTS) is tried when
#                         the first cannot be resolved or needs a newer Java than the one found
#   PULSAR_CACHE_DIR      where distributions are unpacked (default ~/.cache/recordio-bridge)
#   PULSAR_STATE_DIR      pid, configuration, data and logs of this broker (default /tmp/recordio-bridge-pulsar)
#   PULSAR_BROKER_PORT    default 6650;  PULSAR_WEB_PORT default 8090;  PULSAR_BOOKIE_PORT default 3181
#   PULSAR_ZOOKEEPER_PORT default 2181; PULSAR_METADATA zookeeper (default) or rocksdb: the metadata
#                         store. ZooKeeper because the RocksDB store loses the bookie's registration
#                         after a kill -9 and restart (ledgers then fail with "Not enough non-faulty
#                         bookies"); its one drawback is that the embedded ZooKeeper binds 0.0.0.0.
#   PULSAR_BROKER_TLS_PORT default 6651: a TLS listener with a test CA made by openssl in the state
#                         directory (tls/ca.crt), skipped with a warning when openssl is missing
#   PULSAR_HEAP           default 1g;    PULSAR_DIRECT_MEMORY default 1g
#   PULSAR_START_TIMEOUT  seconds to wait for health (default 180)
#   PULSAR_EXTRA_CONF     a file of key=value lines appended to the standalone's configuration
#                         (cluster.sh turns on token authentication and authorisation with it)
#   PULSAR_ADMIN_TOKEN_FILE a token sent as a bearer token by the health check (needed once
#                         authentication is on)
#   JAVA_HOME             the JDK to run the broker with (default: the java on PATH, else the newest under /usr/lib/jvm)
#
# Exit status of start: 0 healthy; 75 (EX_TEMPFAIL) when one of its ports is held by another
# process (before the start, or taken by a broker started at the same moment): the caller picks
# other ports and starts again (with-broker.sh and the tests' broker package do); 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${PULSAR_VERSION:-4.0.8}
fallback=${PULSAR_FALLBACK_VERSION:-3.0.14}
cache=${PULSAR_CACHE_DIR:-$HOME/.cache/recordio-bridge}
state=${PULSAR_STATE_DIR:-${TMPDIR:-/tmp}/recordio-bridge-pulsar}
broker_port=${PULSAR_BROKER_PORT:-6650}
web_port=${PULSAR_WEB_PORT:-8090}
tls_port=${PULSAR_BROKER_TLS_PORT:-6651}
zk_port=${PULSAR_ZOOKEEPER_PORT:-2181}
metadata=${PULSAR_METADATA:-zookeeper}
bookie_port=${PULSAR_BOOKIE_PORT:-3181}
heap=${PULSAR_HEAP:-1g}
direct=${PULSAR_DIRECT_MEMORY:-1g}
timeout=${PULSAR_START_TIMEOUT:-180}
admin_url="http://127.0.0.1:${web_port}"

say() { printf 'pulsar.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

java_major() { # prints the major version of the java binary given
  "$1" -version 2>&1 | sed -n 's/.* version "\([0-9]*\)[."].*/\1/p' | head -n1
}

# required_java VERSION: the Java release a Pulsar line needs (both LTS lines need 17).
required_java() { echo 17; }

find_java() {
  local need=$1 cand m
  for cand in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} "$(readlink -f "$(command -v java 2>/dev/null)" 2>/dev/null || true)" /usr/lib/jvm/*/bin/java; do
    [ -n "$cand" ] && [ -x "$cand" ] || continue
    m=$(java_major "$cand")
    if [ -n "$m" ] && [ "$m" -ge "$need" ]; then echo "$cand"; return 0; fi
  done
  return 1
}

require_tools() {
  command -v curl >/dev/null || die "curl is missing: install it (apt-get install -y curl) and run again."
  if ! find_java 17 >/dev/null; then
    die "no Java 17 or newer found (PATH, JAVA_HOME, /usr/lib/jvm): install one (apt-get install -y openjdk-17-jre-headless) and run again."
  fi
}

dist_dir() { echo "$cache/apache-pulsar-$1"; }

fetch_version() { # fetch_version VERSION -> 0 when unpacked
  local v=$1 dir tarball repo
  dir=$(dist_dir "$v")
  if [ -x "$dir/bin/pulsar" ] && [ -f "$dir/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || die "Maven (mvn) is missing: it resolves Apache Pulsar from Maven Central. Install it (apt-get install -y maven) and run again."
  say "resolving org.apache.pulsar:pulsar-server-distribution:$v (bin tar.gz) with Maven..."
  if ! mvn -B -q dependency:get -Dtransitive=false \
      -Dartifact="org.apache.pulsar:pulsar-server-distribution:$v:tar.gz:bin" >&2; then
    say "Maven could not resolve Apache Pulsar $v"
    return 1
  fi
  repo=$(mvn -B -q help:evaluate -Dexpression=settings.localRepository -DforceStdout 2>/dev/null || true)
  [ -d "$repo" ] || repo="$HOME/.m2/repository"
  tarball="$repo/org/apache/pulsar/pulsar-server-distribution/$v/pulsar-server-distribution-$v-bin.tar.gz"
  [ -f "$tarball" ] || { say "resolved, but $tarball is not there"; return 1; }
  mkdir -p "$cache"
  rm -rf "$dir" "$dir.tmp"; mkdir -p "$dir.tmp"
  tar xzf "$tarball" -C "$dir.tmp" --strip-components=1
  touch "$dir.tmp/.complete"
  mv "$dir.tmp" "$dir"
  say "unpacked Apache Pulsar $v into $dir"
}

# chosen_version: the version that is (or can be made) available and runs on the Java found.
chosen_version() {
  local v
  for v in "$version" "$fallback"; do
    if ! find_java "$(required_java "$v")" >/dev/null; then
      say "Apache Pulsar $v needs Java $(required_java "$v"); none found, trying the next line"
      continue
    fi
    if fetch_version "$v"; then echo "$v"; return 0; fi
  done
  die "could not obtain Apache Pulsar ($version or $fallback); check that Maven reaches Maven Central (mvn -v, ~/.m2/settings.xml)."
}

# make_certs DIR: a test CA and a broker certificate for 127.0.0.1 / localhost (idempotent).
make_certs() {
  local d=$1
  [ -f "$d/broker.crt" ] && return 0
  if ! command -v openssl >/dev/null; then
    say "openssl is missing: no TLS listener (apt-get install -y openssl to test pulsar+ssl://)"
    return 1
  fi
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=bridge test CA" -keyout ca.key -out ca.crt 2>/dev/null
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out broker.key 2>/dev/null
    openssl req -new -key broker.key -subj "/CN=127.0.0.1" -out broker.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >ext.cnf
    openssl x509 -req -in broker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile ext.cnf -out broker.crt 2>/dev/null
  ) || { say "could not make TLS certificates in $d"; return 1; }
}

pid_alive() { [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; }

# tree PID: PID and every process below it (bin/pulsar is a script that execs java, but a
# nohup or a shell may stand between).
tree() {
  local p c
  for p in "$@"; do
    echo "$p"
    for c in $(pgrep -P "$p" 2>/dev/null || true); do tree "$c"; done
  done
}

# listener_pids PORT: the pids of the processes listening on 127.0.0.1:PORT (or any address).
listener_pids() { ss -Htlnp "( sport = :$1 )" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u; }

# owns_ports: the broker we started listens on its binary and web ports itself. A health check
# answered on those ports proves nothing when another process holds them: two brokers started at
# the same moment pick the same free ports, one fails to bind and dies, and the other answers.
owns_ports() {
  local mine p l
  mine=" $(tree "$(cat "$state/pid")" | tr '\n' ' ') "
  for p in "$broker_port" "$web_port"; do
    l=$(listener_pids "$p")
    [ -n "$l" ] || return 1
    for l in $l; do [[ "$mine" == *" $l "* ]] && continue 2; done
    return 2
  done
}

# port_thief: a line naming a port of ours that another process listens on, or nothing.
port_thief() {
  local mine p l
  mine=" $(tree "$(cat "$state/pid" 2>/dev/null || echo 0)" | tr '\n' ' ') "
  for p in "$broker_port" "$web_port" "$bookie_port" "$tls_port" "$zk_port"; do
    for l in $(listener_pids "$p"); do
      [[ "$mine" == *" $l "* ]] || { echo "port $p is held by another process (pid $l: $(tr '\0' ' ' </proc/"$l"/cmdline 2>/dev/null | cut -c1-80))"; return 0; }
    done
  done
}

healthy() {
  # The health check publishes and consumes on a heartbeat topic: the whole broker path works.
  local auth=()
  if [ -n "${PULSAR_ADMIN_TOKEN_FILE:-}" ]; then auth=(-H "Authorization: Bearer $(cat "$PULSAR_ADMIN_TOKEN_FILE")"); fi
  curl -sf -m 10 "${auth[@]}" "$admin_url/admin/v2/brokers/health" >/dev/null 2>&1 &&
    curl -sf -m 5 "${auth[@]}" "$admin_url/admin/v2/namespaces/public" 2>/dev/null | grep -q 'public/default'
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  require_tools
  if pid_alive && healthy; then say "already running (pid $(cat "$state/pid")) at pulsar://127.0.0.1:$broker_port"; return 0; fi
  if pid_alive; then say "a broker process exists but is not healthy; waiting for it"; wait_healthy; return; fi
  local p
  for p in "$broker_port" "$web_port" "$bookie_port" "$tls_port" "$zk_port"; do
    if port_busy "$p"; then
      say "port $p on 127.0.0.1 is already in use by another process: stop it, or choose other ports with PULSAR_BROKER_PORT / PULSAR_WEB_PORT / PULSAR_BOOKIE_PORT / PULSAR_BROKER_TLS_PORT / PULSAR_ZOOKEEPER_PORT."
      exit 75
    fi
  done
  local v home java
  v=$(chosen_version)
  home=$(dist_dir "$v")
  java=$(find_java "$(required_java "$v")")
  mkdir -p "$state/data" "$state/logs"
  sed -e "s/^brokerServicePort=.*/brokerServicePort=$broker_port/" \
      -e "s/^webServicePort=.*/webServicePort=$web_port/" \
      "$here/standalone.conf" >"$state/standalone.conf"
  if make_certs "$state/tls"; then
    cat >>"$state/standalone.conf" <<CONF

# --- TLS listener for the client's TLS tests (certificates made by pulsar.sh).
brokerServicePortTls=$tls_port
tlsCertificateFilePath=$state/tls/broker.crt
tlsKeyFilePath=$state/tls/broker.key
tlsTrustCertsFilePath=$state/tls/ca.crt
CONF
  fi
  if [ -n "${PULSAR_EXTRA_CONF:-}" ]; then
    { echo; echo "# --- from $PULSAR_EXTRA_CONF"; cat "$PULSAR_EXTRA_CONF"; } >>"$state/standalone.conf"
  fi
  echo "$v" >"$state/version"
  say "starting Apache Pulsar $v standalone ($(basename "$(dirname "$(dirname "$java")")")), state in $state"
  date +%s.%N >"$state/started-at"
  (
    cd "$state"
    export JAVA_HOME
    JAVA_HOME=$(dirname "$(dirname "$java")")
    export PULSAR_MEM="-Xms$heap -Xmx$heap -XX:MaxDirectMemorySize=$direct"
    export PULSAR_GC="-XX:+UseG1GC -XX:MaxGCPauseMillis=20"
    export PULSAR_GC_LOG=" "
    export PULSAR_LOG_DIR="$state/logs"
    export PULSAR_LOG_CONF="$here/log4j2.yaml"
    export PULSAR_STANDALONE_CONF="$state/standalone.conf"
    if [ "$metadata" = zookeeper ]; then
      export PULSAR_STANDALONE_USE_ZOOKEEPER=1
    fi
    exec nohup "$home/bin/pulsar" standalone --no-functions-worker --no-stream-storage \
      --bookkeeper-dir "$state/data/bookkeeper" --metadata-dir "$state/data/metadata" \
      --zookeeper-dir "$state/data/zookeeper" --zookeeper-port "$zk_port" \
      --bookkeeper-port "$bookie_port" -a 127.0.0.1 >"$state/logs/stdout.log" 2>&1 </dev/null
  ) &
  echo $! >"$state/pid"
  wait_healthy
}

wait_healthy() {
  local t0 now thief owned
  t0=$(date +%s)
  while :; do
    if ! pid_alive; then
      thief=$(port_thief)
      if [ -n "$thief" ] || grep -qs 'Address already in use' "$state/logs/stdout.log" "$state/logs/pulsar.log" "$state/logs/pulsar-standalone.log"; then
        say "the broker exited during start-up: ${thief:-a port was taken meanwhile (Address already in use)}; start again on other ports"
        rm -f "$state/pid"
        exit 75
      fi
      say "the broker exited during start-up; last lines of its logs:"
      tail -n 40 "$state/logs/stdout.log" "$state/logs/pulsar.log" 2>/dev/null >&2 || true
      exit 1
    fi
    owned=0; owns_ports || owned=$?
    if [ "$owned" = 2 ]; then
      thief=$(port_thief)
      say "${thief:-a port of this broker is held by another process}: stopping the broker started here; start again on other ports"
      kill -KILL $(tree "$(cat "$state/pid")") 2>/dev/null || true
      wait_gone "$(cat "$state/pid")"
      rm -f "$state/pid"
      exit 75
    fi
    if [ "$owned" = 0 ] && healthy; then break; fi
    now=$(date +%s)
    if [ $((now - t0)) -ge "$timeout" ]; then
      say "not healthy after ${timeout}s; last lines of its logs:"
      tail -n 40 "$state/logs/pulsar.log" 2>/dev/null >&2 || true
      exit 1
    fi
    sleep 1
  done
  local started
  started=$(cat "$state/started-at" 2>/dev/null || date +%s)
  say "healthy after $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s: pulsar://127.0.0.1:$broker_port, admin $admin_url (pid $(cat "$state/pid"))"
}

stop() {
  pid_alive || { say "not running"; rm -f "$state/pid"; return 0; }
  local pid i
  pid=$(cat "$state/pid")
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then say "still running after 30 s: kill -9"; kill -KILL "$pid" 2>/dev/null || true; fi
  wait_gone "$pid"
  rm -f "$state/pid"
  say "stopped"
}

wait_gone() { local i; for i in $(seq 1 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done; }

kill9() {
  pid_alive || { say "not running"; return 0; }
  local pid
  pid=$(cat "$state/pid")
  kill -KILL "$pid" 2>/dev/null || true
  wait_gone "$pid"
  rm -f "$state/pid"
  say "killed (kill -9) pid $pid"
}

cmd=${1:-}
case "$cmd" in
  fetch) require_tools; v=$(chosen_version); say "Apache Pulsar $v ready in $(dist_dir "$v")" ;;
  start) start ;;
  stop) stop ;;
  kill) kill9 ;;
  restart) kill9; start ;;
  status) if pid_alive && healthy; then say "healthy: pulsar://127.0.0.1:$broker_port"; else say "not running or not healthy"; exit 1; fi ;;
  env)
    printf 'export PULSAR_URL=pulsar://127.0.0.1:%s\nexport PULSAR_ADMIN_URL=%s\nexport PULSAR_STATE_DIR=%s\n' \
      "$broker_port" "$admin_url" "$state"
    if [ -f "$state/tls/ca.crt" ]; then
      printf 'export PULSAR_TLS_URL=pulsar+ssl://127.0.0.1:%s\nexport PULSAR_TLS_CA_FILE=%s\n' "$tls_port" "$state/tls/ca.crt"
    fi ;;
  wipe) stop; rm -rf "$state"; say "wiped $state" ;;
  *) sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
