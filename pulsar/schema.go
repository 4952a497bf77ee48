package pulsar

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// SchemaType is the kind of a topic's schema (the protocol's Schema.Type).
type SchemaType int32

// The schema types the bridge declares or reads; the values are the protocol's.
const (
	SchemaNone           = SchemaType(pb.Schema_None)
	SchemaString         = SchemaType(pb.Schema_String)
	SchemaJSON           = SchemaType(pb.Schema_Json)
	SchemaProtobuf       = SchemaType(pb.Schema_Protobuf)
	SchemaAvro           = SchemaType(pb.Schema_Avro)
	SchemaProtobufNative = SchemaType(pb.Schema_ProtobufNative)
)

// String is the type's name as the broker's admin API writes it (PROTOBUF_NATIVE...).
func (t SchemaType) String() string {
	switch t {
	case SchemaNone:
		return "NONE"
	case SchemaString:
		return "STRING"
	case SchemaJSON:
		return "JSON"
	case SchemaProtobuf:
		return "PROTOBUF"
	case SchemaAvro:
		return "AVRO"
	case SchemaProtobufNative:
		return "PROTOBUF_NATIVE"
	}
	return pb.Schema_Type(t).String()
}

// Schema is the schema a producer declares of its messages (Pulsar's SchemaInfo): the
// broker registers it for the topic, or checks it against the topic's, when the producer
// is created. A nil *Schema declares none (bytes).
type Schema struct {
	Type SchemaType
	// Name is the SchemaInfo's name ("String" for a string schema, "" otherwise, as the
	// Java client sends).
	Name string
	// Data is the definition: an Avro record for JSON and Avro, the JSON document of a
	// protobuf FileDescriptorSet for ProtobufNative, nothing for String.
	Data       []byte
	Properties map[string]string
}

// Equal reports whether s and o declare the same schema.
func (s *Schema) Equal(o *Schema) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.Type == o.Type && s.Name == o.Name && bytes.Equal(s.Data, o.Data) && maps.Equal(s.Properties, o.Properties)
}

func (s *Schema) proto() *pb.Schema {
	if s == nil {
		return nil
	}
	out := &pb.Schema{Name: proto.String(s.Name), SchemaData: s.Data, Type: pb.Schema_Type(s.Type).Enum()}
	if out.SchemaData == nil {
		out.SchemaData = []byte{}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		out.Properties = append(out.Properties, &pb.KeyValue{Key: proto.String(k), Value: proto.String(s.Properties[k])})
	}
	return out
}

func schemaFromProto(p *pb.Schema) *Schema {
	s := &Schema{Type: SchemaType(p.GetType()), Name: p.GetName(), Data: p.GetSchemaData()}
	for _, kv := range p.GetProperties() {
		if s.Properties == nil {
			s.Properties = map[string]string{}
		}
		s.Properties[kv.GetKey()] = kv.GetValue()
	}
	return s
}

// GetSchema asks the broker owning topic for its schema of that version (the
// SchemaVersion of a message; nil or empty: the latest). A topic without that schema is
// a *ServerError (TopicNotFound, as the broker answers). The lookup and the request are
// bounded by OperationTimeout, like every other request.
func (c *Client) GetSchema(ctx context.Context, topic string, version []byte) (*Schema, error) {
	full, err := TopicName(topic)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.OperationTimeout)
	defer cancel()
	bc, err := c.lookup(ctx, full)
	if err != nil {
		return nil, err
	}
	cn, err := c.pool.Get(ctx, bc.logical, bc.physical, bc.proxied)
	if err != nil {
		return nil, fmt.Errorf("pulsar: schema of %s: %w", full, err)
	}
	id := c.nextRequestID()
	req := &pb.CommandGetSchema{RequestId: proto.Uint64(id), Topic: proto.String(full)}
	if len(version) > 0 {
		req.SchemaVersion = version
	}
	resp, err := cn.Request(ctx, id, &pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA.Enum(), GetSchema: req})
	if err != nil {
		return nil, fmt.Errorf("pulsar: schema of %s: %w", full, err)
	}
	r := resp.GetGetSchemaResponse()
	if r == nil {
		return nil, fmt.Errorf("pulsar: schema of %s: unexpected answer %s", full, resp.GetType())
	}
	if r.ErrorCode != nil {
		return nil, fmt.Errorf("pulsar: schema of %s: %w", full, &ServerError{Code: ServerErrorCode(r.GetErrorCode()), Message: r.GetErrorMessage()})
	}
	return schemaFromProto(r.GetSchema()), nil
}
