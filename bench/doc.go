// Package bench holds side-by-side benchmarks of the bridge against the official
// Apache Pulsar Go client on the same broker in the same run. It is a module of its
// own so the official client stays out of the bridge's go.mod.
package bench
