// Package pb holds the Pulsar binary protocol's protobuf messages, generated from
// pulsar.proto (our own subset of the public PulsarApi.proto).
//
// Regenerate with `go generate ./pulsar/internal/pb` (needs protoc and
// protoc-gen-go: `go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12`).
package pb

//go:generate protoc --go_out=. --go_opt=paths=source_relative pulsar.proto
