// Package client publishes records to the bridge and reads them back over its HTTP
// contract (docs/http-api.md), keeping the rules that make the bridge's guarantees hold
// on the client's side. It imports only the standard library and package recordio, so a
// scheduler can depend on it without the bridge's own dependencies.
//
// # Publishing exactly once
//
// A Publisher sends its records as one long request per stream and reports each record's
// final outcome once: persisted, a duplicate the broker already had, or refused for good. With a stream name (PublisherOptions.StreamName) every record carries a sequence
// number and the broker deduplicates, so a record is stored once however often it is sent.
// That holds only while the client keeps the rule the bridge keeps:
//
//   - keep every record until it has its receipt;
//   - after any failure (a connection cut, 503, 408, a summary whose resumeSequence is not
//     past the last record, a request silent while records wait), open the next request at the first record without a final
//     receipt, with that record's number, and send everything from there again;
//   - skip a record refused for good (400, 404, 413, 415, 422, 502) by its number, and
//     never resend it; resend every other failure;
//   - wait out 409 (another request still holds the stream: it has not noticed its client
//     is gone) and 503/429 with their Retry-After.
//
// The Publisher does all of this: it holds unreceipted records (bounded in bytes,
// PublisherOptions.MaxUnreceiptedBytes; Publish waits for room), resumes with the
// backoff schedule of the bridge's own Pulsar client (Backoff), and survives the bridge's
// kill -9, a move to another replica behind a load balancer, and broker restarts.
//
// What it cannot keep is what the caller's own process loses when it restarts. The caller
// chooses the first record's number (PublisherOptions.FirstSequence): derive it from its
// own durable state, so a record has the same number on every run. A scheduler that
// persists each event with an offset in its log, say, uses that offset; after a restart it
// creates the Publisher with the same StreamName, FirstSequence set to the offset of the
// first event it has no receipt for (Publisher.NextSequence, persisted when convenient;
// an older value is fine, since records the broker has are answered as duplicates), and
// publishes its events from there, in the same order.
//
// # Reading reliably
//
// A Subscriber reads a stream (GET <stream path>) and yields its records as Messages. With
// ack=client it acknowledges by message id or by position on the response that delivered
// the message (Stream-Id). When a response ends, the Subscriber reconnects with backoff;
// what the ended response delivered without an acknowledgement comes again on the new
// one, and an Ack or Nack of such a message returns ErrResponseEnded without sending
// anything: the bridge would answer it 409, having acknowledged nothing.
package client
