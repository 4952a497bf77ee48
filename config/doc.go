// Package config reads, validates and watches the bridge's YAML configuration
// and publishes it as immutable snapshots.
package config
