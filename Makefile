# The bridge's build, test and demo entry points. `make test` is what CI runs.
SHELL := /usr/bin/env bash
GO ?= go
BIN := bin/bridge
RACE_BIN := bin/bridge-race
POISON_BIN := bin/bridge-poison
E2E_RACE ?= ^(TestIngressDrainsOnSIGTERMUnderLoad|TestSIGTERMDoesNotWaitForAClientThatStoppedReading|TestIngressRoutesMesosEventsByType|TestIngressErrorsAreClearAndLoseNothingBefore|TestEgressDeliversOfficialMessagesAsRecordIO|TestEgressResumesAfterTheClientIsKilled|TestEgressClientAcks|TestSharedKeySharedAndFailoverOnTheRealBroker)$$
# The egress scenarios run again on the bridge built with -tags framepoison (every frame buffer
# given back for reuse filled with 0xDB): a record written from a frame released too early shows.
E2E_POISON ?= ^(TestEgressRecordsStayIntactWhileTheBridgeReusesFrames|TestEgressDeliversLargeCompressedJavaMessages|TestEgressClientAcks|TestEgressSeeksALiveStream)$$
# The tests about acknowledgements inside batches that also run on a broker with Pulsar's default
# acknowledgmentAtBatchIndexLevelEnabled=false (e2e/pulsar/default-batch-acks.conf): make e2e's short
# form (the egress nack/dead-letter test on every subscription type, the stream filter over batches, the interop matrix's batch-ack
# and nack/DLQ rows, the replay comparison with the Java client's seek); make interop runs them with the matrix's full form.
E2E_DEFAULT_ACKS ?= ^(TestEgressRetriesAndDeadLettersMessagesInsideBatches|TestInteropWithTheJavaClient|TestEgressFilterDeliversExactlyWhatMatchesOfAMixedMesosStream|TestEgressReplaysByTimeAndByIDAsTheJavaClientSeeks)$$/^(shared|key_shared|exclusive|failover|batch-index-ack|nack-dlq)$$
# The pattern stream's polling run: a broker without topic-list watchers.
E2E_PATTERN ?= ^TestEgressPatternStreamFollowsTopicsAcrossRestartAndUnload$$
PATTERN_POLLING_BROKER = PULSAR_EXTRA_CONF=$(CURDIR)/e2e/pulsar/pattern-polling.conf PULSAR_HEAP=384m PULSAR_DIRECT_MEMORY=384m $(WITH_BROKER)
DEFAULT_ACKS_BROKER = PULSAR_EXTRA_CONF=$(CURDIR)/e2e/pulsar/default-batch-acks.conf PULSAR_HEAP=384m PULSAR_DIRECT_MEMORY=384m $(WITH_BROKER)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
MODULES := . e2e bench k8s internal/schema/mesospb
PULSAR := e2e/pulsar/pulsar.sh
WITH_BROKER := e2e/pulsar/with-broker.sh

.PHONY: all build build-race build-poison e2e-race e2e-poison test check fmt-check vet unit k8s-test image image-test e2e chaos soak interop demo broker-start broker-stop bench bench-codec bench-producer bench-consumer bench-ingress bench-egress bench-acks bench-latency bench-tracing bench-named e2e-exactly-once fuzz clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/bridge

## test: the whole suite (gofmt, go vet, unit tests with -race, manifest checks, e2e on a real broker, the image).
test: check unit k8s-test e2e image-test

check: fmt-check vet

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go') | grep -v '\.pb\.go$$' || true); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi; echo "gofmt: ok"

vet:
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done; echo "go vet: ok"

unit:
	$(GO) test -race -count=1 ./...
	@# The built-in Mesos types held field by field to Mesos 1.11 and to mesos-go (a module of its own).
	cd internal/schema/mesospb && $(GO) test -race -count=1 ./...

## k8s-test: every kustomization rendered (kustomize API), decoded strictly into the Kubernetes API types and checked against the binary.
k8s-test:
	cd k8s && $(GO) test -count=1 ./...

## image: the container image from `make build`'s static binary, FROM scratch, no registry
## (docker when a daemon answers, buildah otherwise; k8s/image/build.sh).
IMAGE ?= recordio-bridge:$(VERSION)
STORAGE_DRIVER ?= vfs
image: build
	IMAGE=$(IMAGE) VERSION=$(VERSION) BIN=$(BIN) STORAGE_DRIVER=$(STORAGE_DRIVER) k8s/image/build.sh

## image-test: the image built with buildah (podman's store) and run with podman as the manifests
## run it, against a real broker (e2e/image_test.go: PULSAR_URL's, or one of its own).
PODMAN ?= podman --storage-driver $(STORAGE_DRIVER) --runtime runc --cgroup-manager cgroupfs
image-test: build
	IMAGE=$(IMAGE) VERSION=$(VERSION) BIN=$(BIN) STORAGE_DRIVER=$(STORAGE_DRIVER) IMAGE_BUILDER=buildah k8s/image/build.sh
	cd e2e && BRIDGE_IMAGE=localhost/$(IMAGE) BRIDGE_BIN=$(CURDIR)/$(BIN) BRIDGE_PODMAN='$(PODMAN)' STORAGE_DRIVER=$(STORAGE_DRIVER) \
		$(GO) test -race -count=1 -p 1 -timeout 10m -run '^TestImage' .

## build-race: the binary built with the race detector, for e2e-race (needs cgo).
build-race:
	CGO_ENABLED=1 $(GO) build -race -trimpath -ldflags '-X main.version=$(VERSION)-race -X main.commit=$(COMMIT)' -o $(RACE_BIN) ./cmd/bridge

## build-poison: the binary built with -tags framepoison (released frames poisoned), for e2e-poison.
build-poison:
	CGO_ENABLED=0 $(GO) build -tags framepoison -trimpath -ldflags '-X main.version=$(VERSION)-poison -X main.commit=$(COMMIT)' -o $(POISON_BIN) ./cmd/bridge

## e2e: black-box tests against one real Apache Pulsar standalone broker for the whole run:
## the whole suite on the release binary, then E2E_RACE on the -race binary; then E2E_DEFAULT_ACKS
## on a second broker with Pulsar's default for batch-index acknowledgements (off: whole batches
## come back; about 5 minutes); then E2E_PATTERN on a third without topic-list watchers
## (enableBrokerSideSubscriptionPatternEvaluation=false: pattern streams poll).
e2e: build build-race build-poison
	e2e/jaeger/jaeger.sh build
	BRIDGE_BIN=$(CURDIR)/$(BIN) BRIDGE_E2E_REQUIRE_TLS=1 $(WITH_BROKER) bash -c 'cd e2e && $(GO) test -race -count=1 -p 1 -timeout 35m $$($(GO) list ./... | grep -v /e2e/chaos$$) && BRIDGE_BIN=$(CURDIR)/$(RACE_BIN) $(GO) test -count=1 -p 1 -timeout 20m -run "$(E2E_RACE)" . && BRIDGE_BIN=$(CURDIR)/$(POISON_BIN) $(GO) test -count=1 -p 1 -timeout 10m -run "$(E2E_POISON)" .'
	BRIDGE_BIN=$(CURDIR)/$(BIN) $(DEFAULT_ACKS_BROKER) bash -c 'cd e2e && $(GO) test -count=1 -p 1 -timeout 10m -run "$(E2E_DEFAULT_ACKS)" .'
	BRIDGE_BIN=$(CURDIR)/$(BIN) $(PATTERN_POLLING_BROKER) bash -c 'cd e2e && $(GO) test -count=1 -p 1 -timeout 10m -run "$(E2E_PATTERN)" .'
	@# The fault suite's short form, on its own production-shaped cluster (one of each fault).
	cd e2e && BRIDGE_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 30m ./chaos

## e2e-race: the scenarios that exercise the bridge's concurrent state (producer pool,
## drain, egress streams) on the -race binary; a race it reports fails the test that
## started it. The test binary itself is built without -race here (the main run checks
## it), so its clients keep the pace the scenarios expect.
e2e-race: build-race
	BRIDGE_BIN=$(CURDIR)/$(RACE_BIN) $(WITH_BROKER) bash -c 'cd e2e && $(GO) test -count=1 -p 1 -timeout 20m -run "$(E2E_RACE)" .'

## e2e-poison: the egress scenarios (E2E_POISON) on the framepoison binary: a record written
## from a frame buffer given back for reuse too early reads 0xDB and fails its test.
e2e-poison: build-poison
	BRIDGE_BIN=$(CURDIR)/$(POISON_BIN) $(WITH_BROKER) bash -c 'cd e2e && $(GO) test -count=1 -p 1 -timeout 10m -run "$(E2E_POISON)" .'

## chaos: the fault suite's full matrix (e2e/chaos) on a production-shaped Pulsar started by
## e2e/pulsar/cluster.sh (two brokers, TLS per broker, tokens, a proxy); loopback only, bounded
## by -timeout; prints the results table (also written to bin/chaos.md). `make e2e` runs its
## short form (one of each fault).
chaos: build
	@mkdir -p bin
	cd e2e && BRIDGE_BIN=$(CURDIR)/$(BIN) CHAOS_FULL=1 CHAOS_TABLE=$(CURDIR)/bin/chaos.md $(GO) test -count=1 -p 1 -timeout 90m ./chaos; \
	status=$$?; cat $(CURDIR)/bin/chaos.md 2>/dev/null; exit $$status

## soak: the mixed load of the multi-replica scenario (three bridges behind HAProxy on the
## cluster.sh cluster) for SOAK_DURATION (1h; SOAK_DURATION=5m for a short one) with a fault
## every few minutes; each replica's RSS and goroutines, sampled every 10 s, must stay within
## ±10 % of their level after warm-up (5-minute medians), and nothing may be lost. Prints the table and writes
## bin/soak/{soak.csv,faults.csv,soak.md,soak.png} (the plot needs gnuplot, docs/chaos.md).
SOAK_DURATION ?= 1h
soak: build
	@mkdir -p bin/soak
	cd e2e && BRIDGE_BIN=$(CURDIR)/$(BIN) SOAK_DURATION=$(SOAK_DURATION) SOAK_OUT=$(CURDIR)/bin/soak $(GO) test -count=1 -p 1 -timeout 0 -v -run '^TestSoak$$' ./chaos; \
	status=$$?; if [ -s $(CURDIR)/bin/soak/soak.csv ]; then gnuplot -e "dir='$(CURDIR)/bin/soak'" $(CURDIR)/e2e/chaos/soak.gp && echo "plot: bin/soak/soak.png"; fi; exit $$status

## interop: the conformance matrix with Pulsar's reference Java client (e2e/interop_test.go, the Java
## peer e2e/javapeer, compiled against the fetched distribution): both directions, every compression,
## batching, chunking, keys and partitions, batch-index acks, nacks and dead letters, encryption, a JSON
## schema; prints the table (also written to bin/interop.md). `make e2e` runs its short form (one row of each kind).
## Then E2E_DEFAULT_ACKS in full form on a broker with Pulsar's default acknowledgmentAtBatchIndexLevelEnabled=false
## (the table in bin/interop-default-acks.md): duplicates of acknowledged batch-mates are counted there, loss fails.
interop: build
	@mkdir -p bin
	BRIDGE_BIN=$(CURDIR)/$(BIN) INTEROP_FULL=1 INTEROP_TABLE=$(CURDIR)/bin/interop.md $(WITH_BROKER) bash -c 'cd e2e && $(GO) test -count=1 -p 1 -timeout 30m -run "^TestInteropWithTheJavaClient$$" .'; \
	status=$$?; cat $(CURDIR)/bin/interop.md 2>/dev/null; \
	BRIDGE_BIN=$(CURDIR)/$(BIN) INTEROP_FULL=1 INTEROP_TABLE=$(CURDIR)/bin/interop-default-acks.md $(DEFAULT_ACKS_BROKER) bash -c 'cd e2e && $(GO) test -count=1 -p 1 -timeout 15m -v -run "$(E2E_DEFAULT_ACKS)" .' || status=1; \
	cat $(CURDIR)/bin/interop-default-acks.md 2>/dev/null; exit $$status

## auth: the authentication proof's full form (e2e/auth_broker_test.go, AUTH_FULL=1) on a broker of its own
## (OpenID, TLS and token providers, authorisation on, the tests' identity provider): one OAuth2 stream for
## 5 minutes with 60-second tokens, then the identity provider stopped for 2 minutes; mutual TLS; a client
## certificate renewed twice during a 5-minute stream, each old one expired before a forced reconnection; a search of
## everything the bridges said for the secrets they were given. `make e2e` runs its short form (15-second
## tokens, a 40 s stream, a 30 s outage).
auth: build
	BRIDGE_BIN=$(CURDIR)/$(BIN) AUTH_FULL=1 $(WITH_BROKER) bash -c 'cd e2e && $(GO) test -count=1 -p 1 -timeout 30m -run "^TestAuthenticatedBroker$$" -v .'

## demo: the bridge's main job end to end on a local broker.
demo: build
	@e2e/demo.sh

## bench: the codec benchmarks, then every side-by-side benchmark (producer, consumer, ingress, named, egress,
## receipt latency) on one broker, ending with one table of their ratios (bench/all.sh). bench-tracing, which writes
## too much for one broker's disk, runs on its own.
bench: build bench-codec
	$(WITH_BROKER) bench/all.sh $(CURDIR)/$(BIN)

bench-codec:
	$(GO) test -run '^$$' -bench . -benchmem -count 3 ./recordio/

bench-producer:
	$(WITH_BROKER) bash -c 'cd bench && $(GO) run ./producer -rounds 7'

bench-consumer:
	$(WITH_BROKER) bash -c 'cd bench && $(GO) run ./consumer -rounds 2'

bench-ingress: build
	$(WITH_BROKER) bash -c 'cd bench && $(GO) run ./ingress -bin $(CURDIR)/$(BIN) -rounds 7'

## bench-named: exactly-once ingress (Stream-Name) against unnamed streams, 1 KiB records, side by side.
bench-named: build
	$(WITH_BROKER) bash -c 'cd bench && $(GO) run ./named -bin $(CURDIR)/$(BIN) -rounds 5'

## e2e-exactly-once: the named-stream kill test's full form (100 000 events; the bridge killed 10 times, the broker 5 times);
## make e2e runs a short form of the same test (8 000 events, 3 and 1 kills).
e2e-exactly-once: build
	BRIDGE_BIN=$(CURDIR)/$(BIN) EXACTLY_ONCE_EVENTS=100000 EXACTLY_ONCE_BRIDGE_KILLS=10 EXACTLY_ONCE_BROKER_KILLS=5 \
		$(WITH_BROKER) bash -c 'cd e2e && $(GO) test -race -count=1 -p 1 -timeout 60m -run TestExactlyOnceAcrossKills -v .'

## bench-latency: receipt latency of records sent one at a time (100, 1 000 and 5 000/s), through the bridge,
## Pulsar's WebSocket producer and the official client, in turn in one run.
bench-latency: build
	$(WITH_BROKER) bash -c 'cd bench && $(GO) run ./latency -bin $(CURDIR)/$(BIN) -rounds 3'

bench-egress: build
	$(WITH_BROKER) bash -c 'cd bench && $(GO) run ./egress -bin $(CURDIR)/$(BIN) -rounds 7'

## bench-acks: what /ack costs a client (ack=client) with the broker's confirmation waited for
## (ackReceipt: true) and without (false): acknowledgements per second and /ack's p50 and p99.
bench-acks: build
	$(WITH_BROKER) bash -c 'cd bench && $(GO) run ./acks -bin $(CURDIR)/$(BIN) -rounds 3'

# One broker per shape: both shapes' slices on one standalone write ~35 GB, and its
# bookie refuses writes once the disk is 95 % full.
bench-tracing: build
	for p in 1 8; do $(WITH_BROKER) bash -c "cd bench && $(GO) run ./tracing -bin $(CURDIR)/$(BIN) -parallel $$p -rounds 20 -sat-rounds 10" || exit 1; done

FUZZTIME ?= 1m
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzReader -fuzztime $(FUZZTIME) ./recordio/
	$(GO) test -run '^$$' -fuzz FuzzRoundTrip -fuzztime $(FUZZTIME) ./recordio/
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./pulsar/internal/frame/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./pulsar/internal/delivery/
	$(GO) test -run '^$$' -fuzz FuzzDecompress -fuzztime $(FUZZTIME) ./pulsar/internal/compress/
	$(GO) test -run '^$$' -fuzz FuzzParseMessageID -fuzztime $(FUZZTIME) ./pulsar/
	$(GO) test -run '^$$' -fuzz FuzzTemplate -fuzztime $(FUZZTIME) ./mapping/
	$(GO) test -run '^$$' -fuzz FuzzReadIDs -fuzztime $(FUZZTIME) ./egress/
	$(GO) test -run '^$$' -fuzz FuzzReceiptParseAgreesWithEncodingJSON -fuzztime $(FUZZTIME) ./client/
	$(GO) test -run '^$$' -fuzz FuzzDifferential -fuzztime $(FUZZTIME) ./telemetry/otlpwire/
	$(GO) test -run '^$$' -fuzz FuzzPathValue -fuzztime $(FUZZTIME) ./internal/schema/
	$(GO) test -run '^$$' -fuzz FuzzConverterJSONLosesNothing -fuzztime $(FUZZTIME) ./internal/schema/

broker-start:
	$(PULSAR) start

broker-stop:
	$(PULSAR) stop

clean:
	rm -rf bin
