// Package egress streams Pulsar subscriptions to HTTP clients as RecordIO,
// granting flow permits as records leave and acknowledging what reached the client.
package egress
