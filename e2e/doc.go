// Package e2e holds the bridge's black-box tests: a real Apache Pulsar standalone
// broker, the built binary, and independent peers (the official pulsar-client-go,
// the mesos-go RecordIO reader) that prove wire compatibility.
package e2e
