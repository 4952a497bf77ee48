// Package config reads, validates and watches the bridge's YAML configuration
// and publishes it as immutable snapshots.
//
// Decoding is strict: an unknown key is an error naming its line. Durations are Go
// durations ("30s"), sizes are bytes with an optional KiB/MiB/GiB suffix, and secrets
// are given by reference ("env:NAME" or "file:/path"), never inline. Validate reports
// every problem at once, each with its path in the document and the value at fault.
package config
