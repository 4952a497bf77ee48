#!/usr/bin/env bash
# gen.sh: rewrite ../java/ (the golden payloads of the compress package's tests) with the Java
# client's own codecs: JavaCodecs.java compiled against an Apache Pulsar distribution's lib/.
#   DIST  the distribution (default: where e2e/pulsar/pulsar.sh unpacks it,
#         ${PULSAR_CACHE_DIR:-~/.cache/recordio-bridge}/apache-pulsar-${PULSAR_VERSION:-4.0.8})
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIST=${DIST:-${PULSAR_CACHE_DIR:-$HOME/.cache/recordio-bridge}/apache-pulsar-${PULSAR_VERSION:-4.0.8}}
[ -d "$DIST/lib" ] || { echo "gen.sh: no Apache Pulsar distribution at $DIST (run e2e/pulsar/pulsar.sh fetch, or set DIST)" >&2; exit 1; }
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac -nowarn -d "$classes" -cp "$DIST/lib/*" "$here/JavaCodecs.java"
rm -rf "$here/../java"
java -cp "$classes:$DIST/lib/*" JavaCodecs gen "$here/../java"
ls -l "$here/../java"
