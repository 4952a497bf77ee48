package pulsar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// regState is where a producer's or consumer's registration with the broker stands.
// Every partition producer and partition consumer moves through these states:
//
//	registering --PRODUCER_SUCCESS/SUCCESS on an open connection--> ready
//	registering --error, timeout, or the connection closed meanwhile--> reconnecting
//	ready --the connection closed, CLOSE_PRODUCER/CLOSE_CONSUMER, TOPIC_MIGRATED--> reconnecting
//	reconnecting --backoff elapsed--> registering
//	registering --a permanent refusal (authorization, topic not found, ...)--> failed
//	any --Close--> closed
//
// The rule that keeps a registration from being lost: the handler of the attempt in
// progress and of the registration in place is the current one, and a close that
// reaches the current handler always has an effect. In registering it marks the attempt
// lost (its answer, even a success, is then a failed attempt); in ready it schedules a
// reconnect. Closes that reach an older handler are ignored.
type regState int

const (
	stateRegistering regState = iota
	stateReady
	stateReconnecting
	stateFailed
	stateClosed
)

func (s regState) String() string {
	switch s {
	case stateRegistering:
		return "registering"
	case stateReady:
		return "ready"
	case stateReconnecting:
		return "reconnecting"
	case stateFailed:
		return "failed"
	case stateClosed:
		return "closed"
	}
	return "unknown"
}

// errLostWhileRegistering: the connection closed between sending PRODUCER/SUBSCRIBE and
// recording the broker's answer; the attempt counts as failed and is retried.
var errLostWhileRegistering = errors.New("pulsar: the connection closed while registering")

// lostToClose reports whether a registration attempt failed only because its
// connection closed (before or right after the broker's answer): worth another attempt
// on a new connection even while creating the producer or consumer.
func lostToClose(err error) bool {
	return errors.Is(err, errLostWhileRegistering) || errors.Is(err, ErrConnectionClosed)
}

// maxRegistrationRaces is how many times creating a producer or consumer retries a
// registration lost to a closing connection before it reports the error.
const maxRegistrationRaces = 3

// transientRefusal reports whether the broker refused a lookup or a registration for a
// reason that passes by itself within moments: its metadata is changing (a namespace
// bundle being unloaded, or re-acquired after the broker's metadata session expired, as
// after a freeze), it is not ready to serve the topic yet, it is rate-limiting, or it
// refused the connection's credentials (AuthenticationError: a broker restarted before
// it can reach its identity provider, a token its clock expires a second early). A
// creation retries these within its deadline instead of failing at once, as the Java
// client retries a retriable error until its operation timeout.
func transientRefusal(err error) bool {
	var se *ServerError
	if !errors.As(err, &se) {
		return false
	}
	switch pb.ServerError(se.Code) {
	case pb.ServerError_ServiceNotReady, pb.ServerError_MetadataError, pb.ServerError_TooManyRequests,
		pb.ServerError_AuthenticationError:
		return true
	}
	return false
}

// creationRetry runs one step of creating a producer or consumer (reading the
// partitions, registering a partition) until it succeeds or fails otherwise: a
// registration lost to a closing connection is tried again at once, up to
// maxRegistrationRaces times; a transient refusal is tried again after b's backoff
// (each wait at most maxCreationWait), for as long as ctx leaves time for the wait.
// When the deadline comes first, the error is the step's own (the last refusal), so
// callers classify it as before, also when the deadline cut the last attempt short (its
// error then wraps the refusal before it); when ctx is cancelled or the client closes (closing)
// during a wait, it is context.Canceled or ErrClientClosed, wrapping the last refusal.
func creationRetry(ctx context.Context, closing <-chan struct{}, b Backoff, step func() error) error {
	b = b.withDefaults()
	races, refusals := 0, 0
	var refused error // the last transient refusal
	for {
		err := step()
		switch {
		case err == nil:
			return nil
		case lostToClose(err):
			races++
			if races == maxRegistrationRaces {
				return err
			}
			continue
		case !transientRefusal(err):
			if refused != nil && ctx.Err() != nil {
				// The time ran out during this attempt (a dial cut by the deadline, say):
				// what the broker said before is what the caller needs to hear.
				return fmt.Errorf("%w (the broker's last answer before: %w)", err, refused)
			}
			return err
		}
		refused = err
		wait := min(b.delay(refusals), maxCreationWait)
		refusals++
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if cerr := ctx.Err(); !errors.Is(cerr, context.DeadlineExceeded) {
				return fmt.Errorf("%w (the broker's last answer: %w)", cerr, err)
			}
			return err
		case <-closing:
			t.Stop()
			return fmt.Errorf("%w (the broker's last answer: %w)", ErrClientClosed, err)
		case <-t.C:
		}
	}
}

// maxCreationWait bounds each wait of a creation's retries: they all fit in one
// operation timeout, so they come often.
const maxCreationWait = 2 * time.Second

// stableAfter is how long a registration must last before a later loss restarts the
// backoff from its initial delay. Shorter-lived registrations (a broker that closes the
// connection right after accepting the producer, say because every frame it gets is too
// large) keep the backoff growing instead of reconnecting at once, thousands of times.
func stableAfter(b Backoff) time.Duration {
	return min(max(time.Second, 10*b.Initial), b.Max)
}

// permanentRegistrationError reports whether a refusal of PRODUCER or SUBSCRIBE cannot
// be cured by retrying: the producer or consumer fails for good with it. Everything else
// (a closed connection, a timeout, ServiceNotReady, TooManyRequests, a backlog quota,
// ProducerBusy/ConsumerBusy, a lookup failure, a handshake refused with
// AuthenticationError...) is temporary and retried with backoff. An AuthenticationError
// answering a reconnect's CONNECT says nothing lasting about the producer: the broker
// may accept the same credentials on the next CONNECT (it was restarted before it could
// reach its identity provider, its clock runs a second ahead, a key rotation reached it
// first), and the Java client reconnects after it.
func permanentRegistrationError(err error, consumer bool) bool {
	var se *ServerError
	if !errors.As(err, &se) {
		return false
	}
	switch pb.ServerError(se.Code) {
	case pb.ServerError_AuthorizationError,
		pb.ServerError_InvalidTopicName, pb.ServerError_IncompatibleSchema,
		pb.ServerError_UnsupportedVersionError, pb.ServerError_NotAllowedError,
		pb.ServerError_ProducerFenced, pb.ServerError_InvalidTxnStatus:
		return true
	case pb.ServerError_TopicNotFound, pb.ServerError_SubscriptionNotFound:
		// A producer keeps trying (auto-creation, a topic being recreated); an egress
		// consumer of a deleted topic or subscription ends instead of retrying for ever.
		return consumer
	case pb.ServerError_TopicTerminatedError:
		return !consumer // a consumer still reads a terminated topic to its end
	}
	return false
}

// nameBusy reports whether the broker refused a registration with ProducerBusy: another
// producer holds the name on the topic (or an exclusive one holds the topic).
func nameBusy(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && pb.ServerError(se.Code) == pb.ServerError_ProducerBusy
}
