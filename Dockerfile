# The bridge as a container image: `make build`'s static binary and the build host's CA bundle
# on an empty base, run as a numeric non-root user. No registry is needed: image/build.sh stages
# the build context (bin/image-context/rootfs) and builds with docker when a daemon answers,
# with buildah otherwise (`make image`). One COPY, so one layer.
FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
ARG SOURCE=https://github.com/recordio-bridge/bridge
LABEL org.opencontainers.image.title="recordio-bridge" \
      org.opencontainers.image.description="Mesos RecordIO HTTP streams to Apache Pulsar topics and back" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}"
# rootfs/bridge and rootfs/etc/ssl/certs/ca-certificates.crt (Debian's ca-certificates: the
# roots for pulsar+ssl:// and OTLP over TLS, at the path Go's crypto/x509 reads first on Linux).
COPY rootfs/ /
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/bridge"]
CMD ["run", "-config", "/etc/bridge/config.yaml"]
