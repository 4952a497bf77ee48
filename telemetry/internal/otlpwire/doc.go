// Package otlpwire is an sdktrace.SpanExporter whose one job is to send the spans it is
// given as an OTLP ExportTraceServiceRequest encoded straight from the ReadOnlySpan values
// with protowire into a reused buffer (no proto structs, no reflection), over OTLP/HTTP
// (protobuf) or gRPC, configured by the same OTEL_EXPORTER_OTLP_* variables as the
// official exporters.
//
// Its contract is the SDK's official OTLP exporter: for the same spans the request it
// sends decodes to a message proto.Equal to the official one's (differential_test.go),
// with these deliberate differences, each tested:
//   - resources are sent in the order they first appear in the batch (the official
//     exporter's order is a map's);
//   - a string that is not valid UTF-8 is sent with each invalid byte sequence replaced
//     by U+FFFD, where the official exporter fails the whole batch;
//   - a partial success from the collector is reported to otel.Handle and counted
//     (Exporter.Rejected), and ExportSpans returns nil, where the official exporter
//     returns it as an error.
package otlpwire
