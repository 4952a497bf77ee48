package pulsarpool

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/internal/schema"
)

// Record types a Converter deals in.
const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/x-protobuf"
)

// schemaCache holds the converters of the schemas fetched (GET_SCHEMA), by topic and
// version: a schema version never changes, so an entry is good for ever. Failures are
// not kept, so a broker that could not answer is asked again by the next message.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]*schemaEntry
}

type schemaEntry struct {
	ready chan struct{}
	conv  *schema.Converter
	err   error
}

// maxCachedSchemas bounds the cache (a stream over many topics, each with versions).
const maxCachedSchemas = 1024

// Converts implements egress.Converter: protobuf records convert to JSON.
func (s *Subscriber) Converts(from, to string) bool { return from == mediaProtobuf && to == mediaJSON }

// Convert implements egress.Converter: the payload, a record of the message's schema
// version, as JSON.
func (s *Subscriber) Convert(ctx context.Context, d *egress.Delivery, payload []byte, from, to string) ([]byte, error) {
	if !s.Converts(from, to) {
		return nil, fmt.Errorf("%w: %s records to %s", schema.ErrNotConvertible, from, to)
	}
	if len(d.SchemaVersion) == 0 {
		return nil, fmt.Errorf("%w: message %s of %s carries no schema version (its producer declared no schema)", schema.ErrNotConvertible, d.ID, d.Topic)
	}
	conv, err := s.converter(ctx, d.Topic, d.SchemaVersion)
	if err != nil {
		return nil, err
	}
	return conv.JSON(payload)
}

func (s *Subscriber) converter(ctx context.Context, topic string, version []byte) (*schema.Converter, error) {
	key := topic + "\x00" + string(version)
	c := &s.schemas
	for {
		c.mu.Lock()
		if c.m == nil {
			c.m = map[string]*schemaEntry{}
		}
		e, ok := c.m[key]
		if !ok {
			if len(c.m) >= maxCachedSchemas {
				clear(c.m)
			}
			e = &schemaEntry{ready: make(chan struct{})}
			c.m[key] = e
			c.mu.Unlock()
			info, err := s.client.GetSchema(ctx, topic, version)
			if err == nil {
				e.conv, err = schema.NewConverter(info)
			} else {
				err = fmt.Errorf("%w: the schema of %s at version %x: %w", egress.ErrUnavailable, topic, version, err)
			}
			e.err = err
			if err != nil && !errors.Is(err, schema.ErrNotConvertible) {
				c.mu.Lock()
				if c.m[key] == e {
					delete(c.m, key)
				}
				c.mu.Unlock()
			}
			close(e.ready)
			return e.conv, e.err
		}
		c.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if errors.Is(e.err, context.Canceled) {
			// The request that fetched it went away first: this one, still served,
			// asks itself.
			continue
		}
		return e.conv, e.err
	}
}
