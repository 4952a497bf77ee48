// Package ingress decodes RecordIO HTTP request streams, routes every record
// through the mapping tables and publishes it to Pulsar, answering each record
// with a receipt once the broker has persisted it.
package ingress
