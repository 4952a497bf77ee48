package app

import (
	"fmt"
	"os"
	"time"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/telemetry"
)

// snapshot is one loaded configuration: the file's bytes, the parsed values, the
// compiled routes and tokens. Snapshots are immutable and swapped whole.
type snapshot struct {
	raw    []byte
	cfg    config.Config
	table  *mapping.Table
	auth   *admission.Tokens
	loaded time.Time
}

// Validate checks a configuration file exactly as start-up does, without binding the
// listeners: it is load, which New calls first.
func Validate(path string) error {
	_, err := load(path)
	return err
}

// load reads and checks a configuration file as start-up does: the checks of every
// reload and those of the tracing environment for the configured exporter (read at
// start-up only). It is the one function of both `bridge validate` and New.
func load(path string) (*snapshot, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	return check(path, raw, true)
}

// check parses, validates and compiles a configuration (and, at start-up, checks the
// tracing environment), reporting every problem of all of them at once: the one path of
// `bridge validate`, start-up and every reload.
func check(path string, raw []byte, startup bool) (*snapshot, error) {
	var table *mapping.Table
	var auth *admission.Tokens
	checks := []config.Check{func(c config.Config) (err error) {
		table, err = mapping.Compile(c)
		return err
	}, func(c config.Config) (err error) {
		auth, err = admission.Compile(c.Auth)
		return err
	}}
	if startup {
		checks = append(checks, func(c config.Config) error { return telemetry.CheckTracing(tracingOf(c)) })
	}
	cfg, err := config.Parse(raw, checks...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &snapshot{raw: raw, cfg: cfg, table: table, auth: auth, loaded: time.Now()}, nil
}

func limitsOf(c config.Config) ingress.Limits {
	in := c.Ingress
	return ingress.Limits{
		MaxRecordBytes: int64(in.MaxRecordBytes), BufferRecordBytes: int64(in.BufferRecordBytes), MaxStreams: in.MaxStreams,
		IdleTimeout: in.IdleTimeout.D(), PendingRecords: in.PendingRecords, PendingBytes: int64(in.PendingBytes),
	}
}

func egressLimitsOf(c config.Config) egress.Limits {
	return egress.Limits{MaxStreams: c.Egress.MaxStreams, WriteTimeout: c.Egress.WriteTimeout.D()}
}

// tracingOf is the tracing section as telemetry takes it; it is read once, at start-up
// (a reload that changes it logs that it needs a restart).
func tracingOf(c config.Config) telemetry.TracingOptions {
	t := c.Tracing
	return telemetry.TracingOptions{SegmentRecords: t.SegmentRecords, SegmentInterval: t.SegmentInterval.D(), PropagateUnsampled: t.PropagateUnsampled}
}

var namedAccessModes = map[string]pulsar.ProducerAccessMode{"shared": pulsar.AccessShared, "exclusiveWithFencing": pulsar.AccessExclusiveWithFencing}

var hashingSchemes = map[string]pulsar.HashingScheme{"murmur3": pulsar.Murmur3_32Hash, "javaString": pulsar.JavaStringHash}

var compressions = map[string]pulsar.Compression{
	"none": pulsar.NoCompression, "lz4": pulsar.LZ4, "zlib": pulsar.ZLib, "zstd": pulsar.ZStd, "snappy": pulsar.Snappy,
}
