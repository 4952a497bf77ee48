package conn

import (
	"errors"
	"fmt"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

var (
	// ErrClosed: the connection is closed; every waiter fails with an error wrapping it.
	ErrClosed = errors.New("pulsar: connection closed")
	// ErrKeepAliveTimeout: nothing arrived from the broker for two keep-alive intervals.
	ErrKeepAliveTimeout = errors.New("pulsar: broker stopped answering (keep-alive timeout)")
	// ErrWriteTimeout: a write to the broker did not complete within the write timeout
	// (the broker stopped reading); the connection is closed.
	ErrWriteTimeout = errors.New("pulsar: broker stopped reading (write timeout)")
	// ErrHandshake: CONNECT was refused or answered with something other than CONNECTED
	// (a connection lost during the handshake is ErrClosed: temporary). A refusal wraps
	// the broker's *ServerError; its Retryable says whether it may pass (an
	// AuthenticationError may, an UnsupportedVersionError may not).
	ErrHandshake = errors.New("pulsar: handshake failed")
	// ErrCredentials: the client's credentials could not be had for CONNECT or an
	// AUTH_CHALLENGE (an expired token its identity provider cannot replace yet, an
	// unreadable token file): temporary, the connection is retried with backoff.
	ErrCredentials = errors.New("pulsar: no credentials to authenticate with")
)

// ServerErrorCode is the broker's error code (the protocol's ServerError enum).
type ServerErrorCode int32

func (c ServerErrorCode) String() string { return pb.ServerError(c).String() }

// ServerError is an error the broker reported, with its code and message.
type ServerError struct {
	Code    ServerErrorCode
	Message string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("pulsar: broker error %s: %s", e.Code, e.Message)
}

// Retryable reports whether the operation may succeed after a reconnect or a new lookup.
// An AuthenticationError is: the broker refuses credentials it may accept a moment later
// (restarted before it can reach its identity provider, a token its clock expires early,
// a key rotation that reached it first), and the Java client retries it too
// (PulsarClientException.isRetriableError). An AuthorizationError is not: the role may
// not use the topic until an administrator grants it.
func (e *ServerError) Retryable() bool {
	switch pb.ServerError(e.Code) {
	case pb.ServerError_AuthenticationError,
		pb.ServerError_ServiceNotReady, pb.ServerError_MetadataError, pb.ServerError_PersistenceError,
		pb.ServerError_TooManyRequests, pb.ServerError_ProducerBusy, pb.ServerError_ConsumerBusy,
		pb.ServerError_UnknownError, pb.ServerError_ChecksumError,
		// A backlog quota refusal lasts until consumers catch up: temporary.
		pb.ServerError_ProducerBlockedQuotaExceededError, pb.ServerError_ProducerBlockedQuotaExceededException:
		return true
	}
	return false
}

// closedError wraps the cause of a connection's end so errors.Is(err, ErrClosed) holds
// and the cause stays reachable.
type closedError struct {
	addr  string
	cause error
}

func (e *closedError) Error() string {
	return fmt.Sprintf("pulsar: connection to %s closed: %v", e.addr, e.cause)
}

func (e *closedError) Is(target error) bool { return target == ErrClosed }
func (e *closedError) Unwrap() error        { return e.cause }
