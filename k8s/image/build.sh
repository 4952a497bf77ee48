#!/usr/bin/env bash
# k8s/image/build.sh: build the bridge's container image from the static binary `make build` made,
# without a registry (the Dockerfile is FROM scratch): docker when a daemon answers, buildah
# otherwise. Reproducible: the same binary and CA bundle give the same image digest, because
# every timestamp (files, history, the created date) is SOURCE_DATE_EPOCH.
#
#   image/build.sh      build $IMAGE and print its id, digest, size and layer count
#
# Environment (all optional):
#   IMAGE              name:tag (default recordio-bridge:$VERSION)
#   BIN                the static binary (default bin/bridge)
#   CA_BUNDLE          the CA roots to ship (default /etc/ssl/certs/ca-certificates.crt, Debian's
#                      ca-certificates)
#   IMAGE_BUILDER      docker or buildah (default: docker when `docker info` answers, else buildah)
#   STORAGE_DRIVER     buildah's containers/storage driver (default vfs: works in containers
#                      and sandboxes without overlay mounts; podman must use the same one)
#   VERSION, REVISION  the version and commit labels (default: git describe / git rev-parse HEAD)
#   SOURCE_DATE_EPOCH  every timestamp in the image (default: the commit time of HEAD)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
say() { printf 'k8s/image/build.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

bin=${BIN:-bin/bridge}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
image=${IMAGE:-recordio-bridge:$version}
driver=${STORAGE_DRIVER:-vfs}

[ -x "$bin" ] || die "$bin is missing: run \`make build\` first (CGO_ENABLED=0, a static binary)."
# A binary that needs a dynamic loader or libc would not start on scratch.
if command -v go >/dev/null && [[ "$(go version -m "$bin" 2>/dev/null || true)" != *CGO_ENABLED=0* ]]; then
  die "$bin was not built with CGO_ENABLED=0: run \`make build\` (a static binary is the only thing that runs on scratch)."
fi
[ -f "$ca" ] || die "no CA bundle at $ca: install Debian's ca-certificates (apt-get install -y ca-certificates) or set CA_BUNDLE."
[[ "$epoch" =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be seconds since the epoch, not '$epoch'."
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

builder=${IMAGE_BUILDER:-}
if [ -z "$builder" ]; then
  # /usr/local/bin/docker may be a client without a daemon: only a daemon that answers counts.
  if command -v docker >/dev/null && timeout 10 docker info >/dev/null 2>&1; then builder=docker; else builder=buildah; fi
fi

# The build context holds only what goes into the image, with fixed modes and times.
ctx=bin/image-context
rm -rf "$ctx"
install -d -m 0755 "$ctx/rootfs/etc/ssl/certs"
install -m 0755 "$bin" "$ctx/rootfs/bridge"
install -m 0644 "$ca" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
find "$ctx" -exec touch -h -d "@$epoch" {} +

args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "CREATED=$created"
  -f Dockerfile -t "$image")
case "$builder" in
  docker)
    if docker buildx version >/dev/null 2>&1; then
      say "building $image with docker buildx (BuildKit)"
      # BuildKit (0.11 and later) takes SOURCE_DATE_EPOCH for the created time and history.
      docker buildx build --load --build-arg "SOURCE_DATE_EPOCH=$epoch" "${args[@]}" "$ctx" >&2
    else
      # Without the buildx plugin the docker client refuses BuildKit builds; the legacy builder
      # makes the same files and layer, but stamps the image with the build's time.
      say "building $image with docker's legacy builder (no buildx plugin: the created time is now, so the digest differs per build)"
      DOCKER_BUILDKIT=0 docker build "${args[@]}" "$ctx" >&2
    fi
    id=$(docker image inspect --format '{{.Id}}' "$image")
    size=$(docker image inspect --format '{{.Size}}' "$image")
    layers=$(docker image inspect --format '{{len .RootFS.Layers}}' "$image")
    digest=-
    ;;
  buildah)
    command -v buildah >/dev/null || die "buildah is missing (and no Docker daemon answers): apt-get install -y buildah podman runc."
    say "building $image with buildah (storage driver $driver)"
    # --timestamp: the created time, the history and every file's mtime; no identity label,
    # so the digest does not name the buildah version.
    buildah --storage-driver "$driver" bud --format oci --layers=false --timestamp "$epoch" --identity-label=false \
      "${args[@]}" "$ctx" >&2
    id=$(buildah --storage-driver "$driver" inspect --type image --format '{{.FromImageID}}' "$image")
    digest=$(buildah --storage-driver "$driver" inspect --type image --format '{{.FromImageDigest}}' "$image")
    size=$(buildah --storage-driver "$driver" images --noheading --format '{{.Size}}' "$image")
    layers=$(buildah --storage-driver "$driver" inspect --type image --format '{{len .OCIv1.RootFS.DiffIDs}}' "$image")
    ;;
  *) die "IMAGE_BUILDER must be docker or buildah, not '$builder'." ;;
esac
say "built $image: id $id, digest $digest, size $size, $layers layer(s)"
