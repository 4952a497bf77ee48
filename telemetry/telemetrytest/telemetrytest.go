// Package telemetrytest has what the tests and benchmarks of tracing share: an OTLP/HTTP
// sink in the process and a meter of the process's CPU.
package telemetrytest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"time"
)

// DropSink is an OTLP/HTTP collector that accepts every export and decodes nothing, as
// cheap as a collector can be. Point OTEL_EXPORTER_OTLP_ENDPOINT at its URL.
func DropSink() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
}

// ProcessCPU is the user and system time this process has used so far.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
