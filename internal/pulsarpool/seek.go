package pulsarpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/pulsar"
)

// The egress subscription moves with the consumer's seek.
var _ egress.Seeker = (*subscription)(nil)

// SeekTime implements egress.Seeker.
func (s *subscription) SeekTime(ctx context.Context, t time.Time) error {
	return seekError(s.c.SeekByTime(ctx, t))
}

// SeekID implements egress.Seeker.
func (s *subscription) SeekID(ctx context.Context, topic, id string) error {
	mid, err := pulsar.ParseMessageID(id)
	if err != nil {
		return fmt.Errorf("%w: %w", egress.ErrBadPosition, err)
	}
	if topic == "" {
		return seekError(s.c.Seek(ctx, mid))
	}
	return seekError(s.c.SeekTopic(ctx, topic, mid))
}

// seekError classifies a seek's failure for egress: an id the topic cannot have is the
// client's (400), a broker that cannot be reached or a consumer still reconnecting is
// temporary (503), the rest is the broker's answer (502).
func seekError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pulsar.ErrInvalidMessageID), errors.Is(err, pulsar.ErrInvalidOptions), errors.Is(err, pulsar.ErrInvalidTopic):
		return fmt.Errorf("%w: %w", egress.ErrBadPosition, err)
	case errors.Is(err, pulsar.ErrSeekNotReady), errors.Is(err, pulsar.ErrConnectionClosed), errors.Is(err, context.DeadlineExceeded),
		pulsar.IsRetryable(err):
		return fmt.Errorf("%w: %w", egress.ErrUnavailable, err)
	}
	return err
}
