# The bridge as a container image: a static binary on an empty base, run as non-root.
#   make image   (docker build -t recordio-bridge:$(VERSION) .)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/bridge ./cmd/bridge

FROM scratch
# CA roots for pulsar+ssl:// and OTLP over TLS.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/bridge /bridge
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/bridge"]
CMD ["run", "-config", "/etc/bridge/config.yaml"]
