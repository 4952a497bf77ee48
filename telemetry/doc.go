// Package telemetry sets up OpenTelemetry tracing and metrics for the bridge and
// carries trace context through Pulsar message properties.
package telemetry
