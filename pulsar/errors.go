package pulsar

import (
	"errors"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"

	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
)

// Errors, matched with errors.Is. Errors returned by this package wrap one of these or
// a *ServerError, with the topic and the values involved in the message.
var (
	// ErrConnectionClosed: the connection to the broker ended (the producer reconnects by itself).
	ErrConnectionClosed = conn.ErrClosed
	// ErrHandshake: the broker refused CONNECT (authentication, version).
	ErrHandshake = conn.ErrHandshake
	// ErrCredentials: the credentials could not be had for CONNECT or an AUTH_CHALLENGE
	// (Authentication.Data failed): temporary, connections are retried with backoff.
	ErrCredentials = conn.ErrCredentials
	// ErrKeepAliveTimeout: the broker stopped answering pings.
	ErrKeepAliveTimeout = conn.ErrKeepAliveTimeout
	// ErrWriteTimeout: the broker stopped reading (a write outlasted WriteTimeout); the
	// connection was closed, so errors wrapping it also match ErrConnectionClosed.
	ErrWriteTimeout = conn.ErrWriteTimeout
	// ErrFrameTooLarge: a frame above the broker's size limit.
	ErrFrameTooLarge = frame.ErrTooLarge
	// ErrProducerClosed: the producer was closed before the message was persisted.
	ErrProducerClosed = errors.New("pulsar: producer closed")
	// ErrProducerFailed: the producer stopped for good (topic terminated, not allowed, fenced);
	// the wrapped cause says why.
	ErrProducerFailed = errors.New("pulsar: producer failed")
	// ErrProducerFenced: an exclusive producer (AccessExclusiveWithFencing) took the topic
	// over, or holds it (AccessExclusive), so this producer may not publish there: its
	// pending messages were not persisted by it. It stops for good, never reconnecting;
	// other producers of the client go on. Errors wrapping it wrap ErrProducerFailed too.
	ErrProducerFenced = errors.New("pulsar: producer fenced: an exclusive producer took the topic over")
	// ErrOutcomeUnknown: the message was sent, but the connection closed before its
	// receipt and the producer then stopped for good (its reconnection was refused for
	// good, by an AuthorizationError say): the broker may have stored it or not. Sending
	// it again is how to know (with deduplication, a stored one is answered as a
	// duplicate), so IsRetryable holds whatever the refusal it wraps.
	ErrOutcomeUnknown = errors.New("pulsar: sent, but the producer stopped before its receipt: the broker may have stored it or not")
	// ErrSendTimeout: the broker did not persist the message within the send timeout.
	ErrSendTimeout = errors.New("pulsar: send timeout")
	// ErrMessageTooLarge: a message above the broker's limit with chunking off, or above MaxChunkedMessageSize.
	ErrMessageTooLarge = errors.New("pulsar: message too large")
	// ErrClientClosed: the client was closed.
	ErrClientClosed = errors.New("pulsar: client closed")
	// ErrLookup: the topic could not be located on a broker.
	ErrLookup = errors.New("pulsar: topic lookup failed")
	// ErrInvalidTopic: a topic name that does not parse.
	ErrInvalidTopic = errors.New("pulsar: invalid topic name")
	// ErrInvalidOptions: options that cannot work together or are out of range.
	ErrInvalidOptions = errors.New("pulsar: invalid options")
	// ErrSequence: a message without a valid SequenceID for a producer with Deduplication,
	// or with one for a producer without it.
	ErrSequence = errors.New("pulsar: invalid sequence id")
	// ErrCorruptInTransit: the broker refused the message's frame as corrupt (ChecksumError)
	// and, before it could be sent again, stored later messages of the same producer; with
	// deduplication on, the broker then takes the resent message for a duplicate of what it
	// already has. The message was NOT stored. Sending it again (as a new message) is safe.
	ErrCorruptInTransit = errors.New("pulsar: message refused as corrupt in transit and not stored")
	// ErrSequenceUsed: (Deduplication) the broker already stored a later sequence id of this
	// producer, so this message can no longer be stored under its own: resending it with the
	// same sequence id would be dropped as a duplicate. Not retryable.
	ErrSequenceUsed = errors.New("pulsar: a later sequence id is already stored; this one can no longer be")
)

// ServerError is an error reported by the broker, with its code.
type ServerError = conn.ServerError

// ServerErrorCode is the broker's error code.
type ServerErrorCode = conn.ServerErrorCode

// IsRetryable reports whether err is worth retrying: a closed connection, a timeout of
// the broker's answer, or a broker error that a reconnect or new lookup can cure.
func IsRetryable(err error) bool {
	if errors.Is(err, ErrSequenceUsed) {
		return false
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		return true
	}
	var se *ServerError
	if errors.As(err, &se) {
		return se.Retryable()
	}
	return errors.Is(err, ErrConnectionClosed) || errors.Is(err, ErrKeepAliveTimeout) || errors.Is(err, ErrSendTimeout) ||
		errors.Is(err, ErrCorruptInTransit)
}

// Broker error codes callers commonly test for, with errors.As and ServerError.Code.
const (
	CodeConsumerBusy    = ServerErrorCode(pb.ServerError_ConsumerBusy) // another consumer holds an Exclusive subscription
	CodeAuthorization   = ServerErrorCode(pb.ServerError_AuthorizationError)
	CodeTopicNotFound   = ServerErrorCode(pb.ServerError_TopicNotFound)
	CodeTopicTerminated = ServerErrorCode(pb.ServerError_TopicTerminatedError)
	// CodeIncompatibleSchema: the topic refuses the producer's schema, or a producer
	// without one (a namespace enforcing schemas).
	CodeIncompatibleSchema = ServerErrorCode(pb.ServerError_IncompatibleSchema)
)
