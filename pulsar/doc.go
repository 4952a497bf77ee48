// Package pulsar is the bridge's own Apache Pulsar client: it speaks the binary
// protocol itself (CONNECT, LOOKUP, PRODUCER, SEND, SUBSCRIBE, FLOW, ACK) over one
// multiplexed connection per broker.
//
// A Producer never loses an accepted message: SendAsync blocks (honouring its context)
// when the pending queue is full instead of dropping, and every message it accepted is
// resent in order, with the same sequence ids, after a reconnect, until the broker
// persists it, the send timeout expires, or the producer fails for good. Callbacks run
// on a goroutine of the producer's own, never on the connection's reader.
package pulsar
