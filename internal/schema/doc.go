// Package schema turns a route's schema configuration into what its producers declare to
// Pulsar (the SchemaInfo the Java client builds for the same type), checks records against
// it, and reads fields of protobuf records by path for routing. It holds the built-in
// Mesos v1 message types.
package schema
