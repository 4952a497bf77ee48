package app

import (
	"errors"
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

// Validate checks a configuration file exactly as start-up does: as every reload does,
// and the tracing environment for the configured exporter (read at start-up only).
func Validate(path string) error {
	s, err := load(path)
	if err != nil {
		return err
	}
	// What start-up checks of the tracing environment for the configured exporter.
	if err := telemetry.CheckTracing(tracingOf(s.cfg)); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// load reads, parses, validates and compiles a configuration file: the one path shared
// by `bridge validate`, start-up and every reload.
func load(path string) (*snapshot, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	return parseSnapshot(path, raw)
}

func parseSnapshot(path string, raw []byte) (*snapshot, error) {
	cfg, err := config.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	table, err := mapping.Compile(cfg)
	auth, aerr := admission.Compile(cfg.Auth)
	if err = errors.Join(err, aerr); err != nil {
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

var hashingSchemes = map[string]pulsar.HashingScheme{"murmur3": pulsar.Murmur3_32Hash, "javaString": pulsar.JavaStringHash}

var compressions = map[string]pulsar.Compression{
	"none": pulsar.NoCompression, "lz4": pulsar.LZ4, "zlib": pulsar.ZLib, "zstd": pulsar.ZStd, "snappy": pulsar.Snappy,
}
