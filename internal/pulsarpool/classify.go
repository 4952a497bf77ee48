package pulsarpool

import (
	"context"
	"errors"
	"fmt"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/pulsar"
)

// failed reports whether err says the producer itself is finished (not the message).
func failed(err error) bool {
	return errors.Is(err, pulsar.ErrProducerFailed) || errors.Is(err, pulsar.ErrProducerClosed)
}

// createError says which producer could not be created: its topic and, when the broker
// refused the schema (IncompatibleSchema: a definition its compatibility policy refuses,
// or none declared to a topic with one in a namespace enforcing schemas), the schema.
func createError(e *producerEntry, err error) error {
	var se *pulsar.ServerError
	if errors.As(err, &se) && se.Code == pulsar.CodeIncompatibleSchema {
		if e.schema.Info() == nil {
			return fmt.Errorf("creating the producer of %s: the topic refuses a producer without a schema (the route declares none; give it the topic's schema): %w", e.topic, err)
		}
		return fmt.Errorf("creating the producer of %s: the topic refuses the schema %s: %w", e.topic, e.schema, err)
	}
	return fmt.Errorf("creating the producer of %s: %w", e.topic, err)
}

// Classify wraps a Pulsar error in the ingress error that decides the HTTP status.
func Classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, pulsar.ErrProducerFenced):
		return fmt.Errorf("%w: %w", ingress.ErrTakenOver, err)
	case errors.Is(err, pulsar.ErrMessageTooLarge):
		return fmt.Errorf("%w: %w", ingress.ErrTooLarge, err)
	case pulsar.IsRetryable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, pulsar.ErrProducerClosed),
		errors.Is(err, pulsar.ErrClientClosed):
		return fmt.Errorf("%w: %w", ingress.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", ingress.ErrRefused, err)
}

// ClassifyCreate is Classify for the error of a producer's creation: failing to reach
// a broker (dialing, the connection, the lookup, the deadline) is temporary, and so is
// a handshake the broker refused with AuthenticationError (it may accept the same
// credentials a moment later: restarted before it reached its identity provider, a
// token its clock expires early); only a broker's refusal that a retry cannot cure
// (authorization, an invalid or terminated topic, a protocol it does not speak, a port
// that is not Pulsar's) or invalid options are refused for good.
func ClassifyCreate(err error) error {
	var se *pulsar.ServerError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, pulsar.ErrProducerFenced):
		return fmt.Errorf("%w: %w", ingress.ErrTakenOver, err)
	case errors.As(err, &se) && !se.Retryable(), errors.Is(err, pulsar.ErrInvalidTopic), errors.Is(err, pulsar.ErrInvalidOptions),
		errors.Is(err, pulsar.ErrHandshake) && !pulsar.IsRetryable(err):
		return fmt.Errorf("%w: %w", ingress.ErrRefused, err)
	}
	return fmt.Errorf("%w: %w", ingress.ErrUnavailable, err)
}

// temporary reports whether a record that failed with err may be resent: anything but
// a refusal for good (too large, refused by the broker).
func temporary(err error) bool {
	return !errors.Is(err, ingress.ErrTooLarge) && !errors.Is(err, ingress.ErrRefused)
}
