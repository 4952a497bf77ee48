// Schemas: a producer's schema registered or refused, and GET_SCHEMA.

package pulsartest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// EnforceSchemas makes a topic with a schema refuse producers that declare none, as a
// namespace with schemaValidationEnforced does.
func (b *Broker) EnforceSchemas(on bool) { b.mu.Lock(); b.enforceSchemas = on; b.mu.Unlock() }

// Schemas returns the schemas registered for topic, oldest first (the version of the
// i-th is i+1, eight bytes big-endian on the wire).
func (b *Broker) Schemas(topic string) []*Schema {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.schemas[topic])
}

// getSchema answers with the topic's schema of the version asked for, or the latest.
func (c *serverConn) getSchema(r *pb.CommandGetSchema) {
	b := c.b
	b.mu.Lock()
	list := b.schemas[r.GetTopic()]
	b.mu.Unlock()
	resp := &pb.CommandGetSchemaResponse{RequestId: proto.Uint64(r.GetRequestId())}
	v := len(list)
	if len(r.GetSchemaVersion()) == 8 {
		v = int(binary.BigEndian.Uint64(r.GetSchemaVersion()))
	}
	if v < 1 || v > len(list) {
		resp.ErrorCode, resp.ErrorMessage = pb.ServerError_TopicNotFound.Enum(), proto.String("No schema found for topic "+r.GetTopic())
	} else {
		resp.Schema, resp.SchemaVersion = list[v-1], schemaVersion(v)
	}
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(), GetSchemaResponse: resp})
}

// checkSchemaLocked registers or checks a producer's schema. The fake's compatibility
// rule: a schema of another type than the topic's is refused; one of the same type is a
// new version unless it equals one already registered.
func (b *Broker) checkSchemaLocked(topic string, s *pb.Schema) ([]byte, string) {
	list := b.schemas[topic]
	if s == nil || s.GetType() == pb.Schema_None {
		if len(list) > 0 && b.enforceSchemas {
			return nil, "Producers cannot connect or send message without a schema to topics with a schema if SchemaValidationEnforced is enabled"
		}
		return nil, ""
	}
	for i, old := range list {
		if old.GetType() == s.GetType() && bytes.Equal(old.GetSchemaData(), s.GetSchemaData()) {
			return schemaVersion(i + 1), ""
		}
	}
	if len(list) > 0 && list[len(list)-1].GetType() != s.GetType() {
		return nil, fmt.Sprintf("Incompatible schema: the topic's schema is %s, the producer's %s", list[len(list)-1].GetType(), s.GetType())
	}
	if b.schemas == nil {
		b.schemas = map[string][]*pb.Schema{}
	}
	b.schemas[topic] = append(list, proto.Clone(s).(*pb.Schema))
	return schemaVersion(len(list) + 1), ""
}

func schemaVersion(v int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
