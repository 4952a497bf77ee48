#!/usr/bin/env bash
# cluster.sh: a production-shaped Apache Pulsar on loopback for the fault suite (e2e/chaos):
# the standalone of pulsar.sh (ZooKeeper, bookie, broker 1) plus a second broker that shares
# its ZooKeeper and bookie, TLS with a certificate per broker (broker 1 is 127.0.0.1 and
# localhost, broker 2 is 127.0.0.2 only), token authentication and authorisation, and a
# Pulsar proxy in front. The single standalone of pulsar.sh stays the default for the rest
# of the suite; this is only for the fault tests.
#
#   cluster.sh start          start all three (idempotent), create the tenant and namespaces
#   cluster.sh stop           stop all three, keep the data
#   cluster.sh env            print the CHAOS_* exports the fault tests read
#   cluster.sh kill NAME      kill -9 one of broker1, broker2, proxy
#   cluster.sh start1 NAME    start one of broker1, broker2, proxy again (after kill)
#   cluster.sh pid NAME       print the process id of broker1, broker2 or proxy
#   cluster.sh heal           bring every member back to serving; prints "repaired: ..." per repair
#   cluster.sh wipe           stop and delete the state directory
#
# Tokens (HS256 with one secret key, made with openssl): superuser (admin calls), proxy (the
# proxy's own role, a proxy role on the brokers), bridge (produce and consume on
# chaos/allowed only; chaos/forbidden exists but grants it nothing).
#
# Environment (all optional): CLUSTER_STATE_DIR (default /tmp/recordio-bridge-cluster),
# CLUSTER_PORT_BASE (default 17600: below the kernel's ephemeral range, so no client socket can hold a port a restart needs): broker 1 uses BASE+0 (pulsar), +1 (TLS), +2 (web),
# +3 (bookie), +4 (ZooKeeper); broker 2 +10 (pulsar), +11 (TLS), +12 (web); the proxy +20
# (pulsar), +22 (web). CLUSTER_HEAP (default 384m) is each JVM's heap and direct memory.
# A (re)started proxy counts as up once a lookup through it works: CLUSTER_PROXY_TIMEOUT
# (default 120 s) per start, CLUSTER_PROXY_ATTEMPTS (default 4) starts.
#
# Exit status of start: 0 up; 75 (EX_TEMPFAIL) when a port of the cluster is held by another
# process (another suite's cluster on the same base, say): the caller chooses another
# CLUSTER_PORT_BASE and starts again (the fault suite does); 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
state=${CLUSTER_STATE_DIR:-${TMPDIR:-/tmp}/recordio-bridge-cluster}
base=${CLUSTER_PORT_BASE:-17600}
heap=${CLUSTER_HEAP:-384m}
b1_port=$base b1_tls=$((base + 1)) b1_web=$((base + 2)) bookie=$((base + 3)) zk=$((base + 4))
b2_port=$((base + 10)) b2_tls=$((base + 11)) b2_web=$((base + 12))
px_port=$((base + 20)) px_web=$((base + 22))
b2_host=127.0.0.2
auth_dir=$state/auth
tls_dir=$state/broker1/tls

say() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# The standalone (broker 1, ZooKeeper, bookie) is pulsar.sh's, in a state directory of its own.
b1env() {
  env PULSAR_STATE_DIR="$state/broker1" PULSAR_BROKER_PORT=$b1_port PULSAR_BROKER_TLS_PORT=$b1_tls \
    PULSAR_WEB_PORT=$b1_web PULSAR_BOOKIE_PORT=$bookie PULSAR_ZOOKEEPER_PORT=$zk \
    PULSAR_HEAP=$heap PULSAR_DIRECT_MEMORY=$heap PULSAR_EXTRA_CONF="$state/auth.conf" \
    PULSAR_ADMIN_TOKEN_FILE="$auth_dir/superuser.token" "$@"
}

b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }

# make_token SUBJECT: an HS256 JWT {"sub": SUBJECT} signed with the secret key, as
# `pulsar tokens create --secret-key` makes it.
make_token() {
  local head body sig
  head=$(printf '{"alg":"HS256"}' | b64url)
  body=$(printf '{"sub":"%s"}' "$1" | b64url)
  sig=$(printf '%s.%s' "$head" "$body" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$(od -An -tx1 -v "$auth_dir/secret.key" | tr -d ' \n')" -binary | b64url)
  printf '%s.%s.%s' "$head" "$body" "$sig"
}

make_auth() {
  [ -f "$auth_dir/bridge.token" ] && return 0
  command -v openssl >/dev/null || die "openssl is missing (apt-get install -y openssl)"
  mkdir -p "$auth_dir"
  openssl rand 32 >"$auth_dir/secret.key"
  local who
  for who in superuser proxy bridge; do make_token "$who" >"$auth_dir/$who.token"; done
}

# The settings both brokers share: token authentication, authorisation, the proxy role.
auth_conf() {
  cat <<CONF
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken
tokenSecretKey=file://$auth_dir/secret.key
authorizationEnabled=true
superUserRoles=superuser,proxy
proxyRoles=proxy
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
brokerClientAuthenticationParameters=file://$auth_dir/superuser.token
brokerDeduplicationEnabled=false
# Topic-level policies live on a system topic (__change_events) whose reader got stuck on a
# broker after ownership moved under a frozen broker, blocking every producer there; the
# suite needs namespace policies only.
systemTopicEnabled=false
topicLevelPoliciesEnabled=false
CONF
}

# broker 2's certificate names 127.0.0.2 only, so a client that verified it against broker 1's
# name (or the service URL's) would fail: each broker is verified under its own host name.
make_b2_cert() {
  local d=$state/broker2/tls
  [ -f "$d/broker.crt" ] && return 0
  mkdir -p "$d"
  (
    cd "$d"
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out broker.key 2>/dev/null
    openssl req -new -key broker.key -subj "/CN=$b2_host" -out broker.csr 2>/dev/null
    printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$b2_host" >ext.cnf
    openssl x509 -req -in broker.csr -CA "$tls_dir/ca.crt" -CAkey "$tls_dir/ca.key" -CAcreateserial -days 30 -extfile ext.cnf -out broker.crt 2>/dev/null
  ) || die "could not make broker 2's certificate"
}

dist() { cat "$state/broker1/version" >/dev/null 2>&1 || die "broker 1 has not started yet"; echo "${PULSAR_CACHE_DIR:-$HOME/.cache/recordio-bridge}/apache-pulsar-$(cat "$state/broker1/version")"; }

java_home() { dirname "$(dirname "$(readlink -f "$(command -v java)")")"; }

pidfile() { case $1 in broker1) echo "$state/broker1/pid" ;; broker2 | proxy) echo "$state/$1/pid" ;; *) die "no such member: $1" ;; esac; }
alive() { local f; f=$(pidfile "$1"); [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }

admin() { # admin METHOD URL [BODY]: an admin call as the superuser
  local m=$1 u=$2
  shift 2
  curl -sf -m 30 -X "$m" -H "Authorization: Bearer $(cat "$auth_dir/superuser.token")" -H 'Content-Type: application/json' ${1:+-d "$1"} "$u"
}

wait_for() { # wait_for NAME COMMAND...: until the command succeeds, while the process lives (CLUSTER_START_TIMEOUT, 300 s)
  local name=$1 t0
  shift
  t0=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    alive "$name" || { say "$name exited during start-up:"; tail -n 30 "$state/$name/logs/"*.log >&2 2>/dev/null || true; exit 1; }
    [ $(($(date +%s) - t0)) -lt "${CLUSTER_START_TIMEOUT:-300}" ] || { say "$name not up after ${CLUSTER_START_TIMEOUT:-300} s"; tail -n 30 "$state/$name/logs/"*.log >&2 2>/dev/null || true; exit 1; }
    sleep 1
  done
}

start_b2() {
  alive broker2 && return 0
  local d=$state/broker2 home
  home=$(dist)
  make_b2_cert
  mkdir -p "$d/logs"
  {
    cat "$home/conf/broker.conf"
    cat <<CONF

# --- cluster.sh: a second broker of the standalone's cluster
metadataStoreUrl=zk:127.0.0.1:$zk
configurationMetadataStoreUrl=zk:127.0.0.1:$zk
metadataStoreSessionTimeoutMillis=10000
clusterName=standalone
bindAddress=$b2_host
advertisedAddress=$b2_host
brokerServicePort=$b2_port
brokerServicePortTls=$b2_tls
webServicePort=$b2_web
webServicePortTls=
tlsCertificateFilePath=$d/tls/broker.crt
tlsKeyFilePath=$d/tls/broker.key
tlsTrustCertsFilePath=$tls_dir/ca.crt
managedLedgerDefaultEnsembleSize=1
managedLedgerDefaultWriteQuorum=1
managedLedgerDefaultAckQuorum=1
functionsWorkerEnabled=false
allowAutoTopicCreationType=non-partitioned
defaultNumberOfNamespaceBundles=4
loadBalancerEnabled=false
brokerShutdownTimeoutMs=5000
maxMessageSize=5242880
acknowledgmentAtBatchIndexLevelEnabled=true
statusFilePath=
CONF
    auth_conf
  } >"$d/broker.conf"
  say "starting broker 2 at pulsar://$b2_host:$b2_port (TLS $b2_tls)"
  (
    cd "$d"
    JAVA_HOME=$(java_home) PULSAR_BROKER_CONF="$d/broker.conf" PULSAR_LOG_DIR="$d/logs" PULSAR_LOG_CONF="$here/log4j2.yaml" \
      PULSAR_MEM="-Xms$heap -Xmx$heap -XX:MaxDirectMemorySize=$heap" PULSAR_GC="-XX:+UseG1GC" PULSAR_GC_LOG=" " \
      exec nohup "$home/bin/pulsar" broker >"$d/logs/stdout.log" 2>&1 </dev/null
  ) &
  echo $! >"$d/pid"
  wait_for broker2 admin GET "http://$b2_host:$b2_web/admin/v2/brokers/health"
  say "broker 2 up (pid $(cat "$d/pid"))"
}

# listening PORT: a socket listens on PORT.
listening() { ss -Htln "( sport = :$1 )" 2>/dev/null | grep -q .; }

# port_free PORT: no socket at all has PORT as its local port (no listener, no connection, no TIME-WAIT).
port_free() { ! ss -Htan "( sport = :$1 )" 2>/dev/null | grep -q .; }

# lookup_tool: e2e/cmd/pulsarlookup, built once into the state directory (rebuilt when its source is newer).
lookup_tool() {
  local bin=$state/bin/pulsarlookup src=$here/../cmd/pulsarlookup/main.go
  if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ]; then
    command -v go >/dev/null || die "go is needed to build e2e/cmd/pulsarlookup, the proxy's readiness check"
    mkdir -p "$state/bin"
    (cd "$here/.." && CGO_ENABLED=0 go build -o "$bin" ./cmd/pulsarlookup) >&2 || die "could not build e2e/cmd/pulsarlookup"
  fi
  echo "$bin"
}

# proxy_serves: a real lookup through the proxy's binary port with the superuser's token (a
# topic's partitions, its lookup, a reader attached on its owner broker), within 20 s. It
# prints the reason when it fails.
proxy_serves() {
  "$(lookup_tool)" -url "pulsar://127.0.0.1:$px_port" -token-file "$auth_dir/superuser.token" \
    -topic persistent://public/default/cluster-proxy-ready -timeout 20s 2>&1 >/dev/null | tail -n 1
  return "${PIPESTATUS[0]}"
}

# proxy_log_tail: what the proxy logged since its last launch: the errors and their causes
# first, then the last lines.
proxy_log_tail() {
  local d=$state/proxy/logs since
  since=$(cat "$d/.offset" 2>/dev/null || echo 0)
  say "the proxy's log since its start (errors, then the tail):"
  {
    tail -c +$((since + 1)) "$d/pulsar-proxy.log" | grep -E ' ERROR |^Caused by' | tail -n 8
    echo ...
    tail -c +$((since + 1)) "$d/pulsar-proxy.log" | grep -v 'requestBufferSize is invalidated' | tail -n 12
  } >&2 2>/dev/null || true
}

# proxy_up ATTEMPT: after a launch, wait until the proxy serves: its process lives, both its
# ports listen and a lookup through it works. An open TCP port is not enough: the proxy binds
# its binary port first, then the web port, and exits when that fails (seen when a client
# connection had taken the web port as its ephemeral port), and it answers lookups only once
# it reaches the metadata store and a broker. Returns 1 (with the reason and the log's tail)
# when the process died or did not serve within CLUSTER_PROXY_TIMEOUT (120 s).
proxy_up() {
  local t0 why=""
  t0=$(date +%s)
  while :; do
    if ! alive proxy; then
      say "proxy exited during start-up (attempt $1)"
      proxy_log_tail
      return 1
    fi
    if ! listening "$px_port" || ! listening "$px_web"; then
      why="ports $px_port and $px_web not both listening"
    elif why=$(proxy_serves); then
      alive proxy && return 0
      continue # died right after the lookup: reported above on the next round
    fi
    if [ $(($(date +%s) - t0)) -ge "${CLUSTER_PROXY_TIMEOUT:-120}" ]; then
      say "proxy (pid $(cat "$(pidfile proxy)")) not serving after ${CLUSTER_PROXY_TIMEOUT:-120} s (attempt $1): ${why:-no reason given}"
      proxy_log_tail
      return 1
    fi
    sleep 1
  done
}

write_proxy_conf() {
  local d=$state/proxy home
  home=$(dist)
  mkdir -p "$d/logs"
  {
    cat "$home/conf/proxy.conf"
    cat <<CONF

# --- cluster.sh: a proxy in front of both brokers, as Kubernetes deployments use
metadataStoreUrl=zk:127.0.0.1:$zk
configurationMetadataStoreUrl=zk:127.0.0.1:$zk
clusterName=standalone
bindAddress=127.0.0.1
advertisedAddress=127.0.0.1
servicePort=$px_port
servicePortTls=
webServicePort=$px_web
webServicePortTls=
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken
tokenSecretKey=file://$auth_dir/secret.key
authorizationEnabled=false
forwardAuthorizationCredentials=true
# The brokers listen on ports of their own, not 6650/6651 (the default allow-list).
brokerProxyAllowedTargetPorts=*
superUserRoles=superuser,proxy
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
brokerClientAuthenticationParameters=file://$auth_dir/proxy.token
CONF
  } >"$d/proxy.conf"
}

launch_proxy() {
  local d=$state/proxy home
  home=$(dist)
  printf '\n--- cluster.sh: start %s\n' "$(date -u +%FT%TZ)" >>"$d/logs/stdout.log"
  stat -c %s "$d/logs/pulsar-proxy.log" >"$d/logs/.offset" 2>/dev/null || echo 0 >"$d/logs/.offset"
  (
    cd "$d"
    JAVA_HOME=$(java_home) PULSAR_PROXY_CONF="$d/proxy.conf" PULSAR_LOG_DIR="$d/logs" PULSAR_LOG_CONF="$here/log4j2.yaml" \
      PULSAR_MEM="-Xms128m -Xmx256m -XX:MaxDirectMemorySize=256m" PULSAR_GC="-XX:+UseG1GC" PULSAR_GC_LOG=" " \
      exec nohup "$home/bin/pulsar" proxy >>"$d/logs/stdout.log" 2>&1 </dev/null
  ) &
  echo $! >"$d/pid"
}

# start_proxy: start the proxy unless it is already serving, and return once a lookup through
# it works. A proxy that lives but does not serve within the deadline is killed and started
# again; a start that dies (a port taken, see proxy_up) is tried again, up to
# CLUSTER_PROXY_ATTEMPTS (4) times; then it fails, saying why.
#
# It does not wait for TIME-WAIT to end: the proxy binds with SO_REUSEADDR (checked: it
# listens again at once beside the TIME-WAIT connections a kill -9 leaves on its port). It
# waits only for its ports to have no listener (a previous proxy still going away).
start_proxy() {
  local attempt attempts=${CLUSTER_PROXY_ATTEMPTS:-4} why t0 p
  lookup_tool >/dev/null
  if alive proxy; then
    if why=$(proxy_serves); then return 0; fi
    say "proxy (pid $(cat "$(pidfile proxy)")) runs but does not serve ($why); waiting for it"
    proxy_up 0 && { say "proxy serving (pid $(cat "$(pidfile proxy)"))"; return 0; }
    say "killing the proxy that does not serve, to start it again"
    kill1 proxy
  fi
  write_proxy_conf
  for attempt in $(seq 1 "$attempts"); do
    t0=$(date +%s)
    for p in "$px_port" "$px_web"; do
      while listening "$p"; do
        [ $(($(date +%s) - t0)) -lt 60 ] || die "port $p still has a listener 60 s after the proxy ended: $(ss -Htlnp "( sport = :$p )" 2>/dev/null)"
        sleep 0.5
      done
    done
    say "starting the proxy at pulsar://127.0.0.1:$px_port (attempt $attempt of $attempts)"
    launch_proxy
    if proxy_up "$attempt"; then
      say "proxy up and serving lookups (pid $(cat "$(pidfile proxy)"), attempt $attempt)"
      return 0
    fi
    alive proxy && kill1 proxy
    [ "$attempt" -lt "$attempts" ] || break
    # A port taken by another socket (an outgoing connection's ephemeral port, its TIME-WAIT)
    # is freed within a minute: wait for both ports to be free, at most 70 s.
    t0=$(date +%s)
    until port_free "$px_port" && port_free "$px_web"; do
      [ $(($(date +%s) - t0)) -lt 70 ] || break
      sleep 1
    done
    say "ports $px_port and $px_web: $(ss -Htan "( sport = :$px_port or sport = :$px_web )" 2>/dev/null | awk '{print $1" "$4"<->"$5}' | tr '\n' ';')"
  done
  die "the proxy did not come up serving lookups after $attempts attempts (see the log above)"
}

setup_namespaces() {
  local w=http://127.0.0.1:$b1_web
  admin GET "$w/admin/v2/tenants/chaos" || admin PUT "$w/admin/v2/tenants/chaos" '{"adminRoles":["superuser"],"allowedClusters":["standalone"]}'
  local ns
  for ns in allowed forbidden; do
    admin GET "$w/admin/v2/namespaces/chaos/$ns/permissions" || admin PUT "$w/admin/v2/namespaces/chaos/$ns" '{"bundles":{"numBundles":4}}'
  done
  admin POST "$w/admin/v2/namespaces/chaos/allowed/permissions/bridge" '["produce","consume"]'
  admin POST "$w/admin/v2/namespaces/chaos/allowed/deduplication" 'true'
  # Retention keeps what the egress subscriptions acknowledged, so the oracle can read it:
  # without it a ledger closed by a broker's crash and fully acknowledged is deleted.
  admin POST "$w/admin/v2/namespaces/chaos/allowed/retention" '{"retentionTimeInMinutes":240,"retentionSizeInMB":4096}'
}

# ports_taken: exit 75 when a port of a member not running yet has a listener (another
# process's; ours would be alive). Broker 1's own are checked by pulsar.sh, which exits 75 too,
# also when another broker takes one during its start.
ports_taken() {
  local p
  alive broker2 || for p in "$b2_port" "$b2_tls" "$b2_web"; do
    listening "$p" && { say "port $p is held by another process ($(ss -Htlnp "( sport = :$p )" 2>/dev/null | grep -o 'users:.*' | head -n1)): choose another CLUSTER_PORT_BASE"; exit 75; }
  done
  alive proxy || for p in "$px_port" "$px_web"; do
    listening "$p" && { say "port $p is held by another process ($(ss -Htlnp "( sport = :$p )" 2>/dev/null | grep -o 'users:.*' | head -n1)): choose another CLUSTER_PORT_BASE"; exit 75; }
  done
  return 0
}

start() {
  mkdir -p "$state"
  ports_taken
  make_auth
  auth_conf >"$state/auth.conf"
  b1env "$here/pulsar.sh" start
  start_b2
  start_proxy
  setup_namespaces >/dev/null
  say "cluster up: brokers $(admin GET "http://127.0.0.1:$b1_web/admin/v2/brokers/standalone")"
}

stop1() {
  case $1 in
    broker1) b1env "$here/pulsar.sh" stop ;;
    *)
      alive "$1" || return 0
      local pid i
      pid=$(cat "$(pidfile "$1")")
      kill -TERM "$pid" 2>/dev/null || true
      for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$pid" 2>/dev/null || true
      rm -f "$(pidfile "$1")"
      say "stopped $1"
      ;;
  esac
}

kill1() {
  case $1 in
    broker1) b1env "$here/pulsar.sh" kill ;;
    *)
      alive "$1" || { say "$1 not running"; return 0; }
      local pid i
      pid=$(cat "$(pidfile "$1")")
      kill -CONT "$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && die "$1 (pid $pid) still there 60 s after kill -9"
      rm -f "$(pidfile "$1")"
      say "killed (kill -9) $1, pid $pid"
      ;;
  esac
}

start1() {
  case $1 in
    broker1) b1env "$here/pulsar.sh" start ;;
    broker2) start_b2 ;;
    proxy) start_proxy ;;
    *) die "no such member: $1" ;;
  esac
}

# heal: bring every member back to serving after a fault test, printing one "repaired: ..."
# line on stdout per repair (nothing when all was well): a stopped (SIGSTOP) process is
# continued, a dead one started, a broker that stays unhealthy or a proxy that does not serve
# lookups is killed and started again. Fails, saying why, when it cannot.
heal() {
  local m pid
  for m in broker1 broker2 proxy; do
    alive "$m" || continue
    pid=$(cat "$(pidfile "$m")")
    if [ "$(ps -o state= -p "$pid" 2>/dev/null | tr -d ' ')" = T ]; then
      kill -CONT "$pid" 2>/dev/null || true
      echo "repaired: $m (pid $pid) was stopped (SIGSTOP); continued it"
    fi
  done
  if ! alive broker1; then
    echo "repaired: broker1 was not running; started it"
    b1env "$here/pulsar.sh" start
  fi
  heal_broker broker2 "http://$b2_host:$b2_web"
  if ! alive proxy; then
    echo "repaired: the proxy was not running; started it"
    start_proxy
  elif ! proxy_serves >/dev/null && ! proxy_up heal; then # proxy_up: a while to come back on its own
    echo "repaired: the proxy did not serve lookups for ${CLUSTER_PROXY_TIMEOUT:-120} s; started it again"
    alive proxy && kill1 proxy
    start_proxy
  fi
}

# heal_broker broker2 URL: broker 2 running and healthy within 120 s, else started again.
heal_broker() {
  local t0
  if ! alive "$1"; then
    echo "repaired: $1 was not running; started it"
    start_b2
    return
  fi
  t0=$(date +%s)
  until admin GET "$2/admin/v2/brokers/health" >/dev/null 2>&1; do
    if [ $(($(date +%s) - t0)) -ge 120 ]; then
      echo "repaired: $1 (pid $(cat "$(pidfile "$1")")) not healthy for 120 s; killed and started it again"
      kill1 "$1"
      start_b2
      return
    fi
    sleep 1
  done
}

cmd=${1:-}
case "$cmd" in
  start) start ;;
  stop) stop1 proxy; stop1 broker2; stop1 broker1 ;;
  kill) kill1 "${2:?kill NAME}" ;;
  start1) start1 "${2:?start1 NAME}" ;;
  pid) cat "$(pidfile "${2:?pid NAME}")" ;;
  heal) heal ;;
  env)
    cat <<ENV
export CHAOS_STATE_DIR=$state
export CHAOS_SCRIPT=$here/cluster.sh
export CHAOS_BROKER1_URL=pulsar://127.0.0.1:$b1_port
export CHAOS_BROKER1_TLS_URL=pulsar+ssl://127.0.0.1:$b1_tls
export CHAOS_BROKER1_ADMIN_URL=http://127.0.0.1:$b1_web
export CHAOS_BROKER2_URL=pulsar://$b2_host:$b2_port
export CHAOS_BROKER2_TLS_URL=pulsar+ssl://$b2_host:$b2_tls
export CHAOS_BROKER2_ADMIN_URL=http://$b2_host:$b2_web
export CHAOS_PROXY_URL=pulsar://127.0.0.1:$px_port
export CHAOS_PROXY_WEB_URL=http://127.0.0.1:$px_web
export CHAOS_TLS_CA_FILE=$tls_dir/ca.crt
export CHAOS_SUPERUSER_TOKEN_FILE=$auth_dir/superuser.token
export CHAOS_BRIDGE_TOKEN_FILE=$auth_dir/bridge.token
ENV
    ;;
  wipe) stop1 proxy; stop1 broker2; stop1 broker1; rm -rf "$state"; say "wiped $state" ;;
  *) sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
