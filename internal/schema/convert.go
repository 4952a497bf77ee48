package schema

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/recordio-bridge/bridge/pulsar"
)

// ErrNotConvertible is wrapped by the errors of NewConverter and Converter.JSON: the
// message cannot be given as JSON by its schema.
var ErrNotConvertible = errors.New("cannot convert the record")

// Converter gives records of a topic's schema as JSON. It is immutable and safe for
// concurrent use.
type Converter struct {
	message protoreflect.MessageDescriptor // protobuf_native; nil: records are JSON as stored
	typ     pulsar.SchemaType
}

// NewConverter reads a schema as the broker gives it (GET_SCHEMA): a PROTOBUF_NATIVE
// schema's descriptors become the message type records are decoded as; JSON and AVRO
// topics' records are served as stored (a JSON topic's are JSON).
func NewConverter(s *pulsar.Schema) (*Converter, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: the message has no schema", ErrNotConvertible)
	}
	switch s.Type {
	case pulsar.SchemaJSON, pulsar.SchemaAvro, pulsar.SchemaString:
		return &Converter{typ: s.Type}, nil
	case pulsar.SchemaProtobufNative:
	default:
		return nil, fmt.Errorf("%w: the topic's schema is %s", ErrNotConvertible, s.Type)
	}
	var doc struct {
		FileDescriptorSet   string `json:"fileDescriptorSet"`
		RootMessageTypeName string `json:"rootMessageTypeName"`
	}
	if err := json.Unmarshal(s.Data, &doc); err != nil {
		return nil, fmt.Errorf("%w: the PROTOBUF_NATIVE schema is not its JSON document: %w", ErrNotConvertible, err)
	}
	set, err := base64.StdEncoding.DecodeString(doc.FileDescriptorSet)
	if err != nil {
		return nil, fmt.Errorf("%w: the schema's fileDescriptorSet: %w", ErrNotConvertible, err)
	}
	files, err := loadFiles(set)
	if err != nil {
		return nil, fmt.Errorf("%w: the schema's fileDescriptorSet: %w", ErrNotConvertible, err)
	}
	md, err := findMessage(files, doc.RootMessageTypeName)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotConvertible, err)
	}
	return &Converter{message: md, typ: s.Type}, nil
}

// JSON gives a record as JSON: a protobuf record as protojson (the .proto's field names,
// enums by name), a JSON or Avro topic's record as stored.
func (c *Converter) JSON(payload []byte) ([]byte, error) {
	if c.message == nil {
		if c.typ == pulsar.SchemaAvro {
			return nil, fmt.Errorf("%w: the topic's records are Avro binary", ErrNotConvertible)
		}
		return payload, nil
	}
	m := dynamicpb.NewMessage(c.message)
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(payload, m); err != nil {
		return nil, fmt.Errorf("%w: not a %s: %w", ErrNotConvertible, c.message.FullName(), err)
	}
	out, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		// A record that decodes but lacks a required field (proto2), which protojson
		// (like the Java client's parser) refuses.
		return nil, fmt.Errorf("%w: not a whole %s: %w", ErrNotConvertible, c.message.FullName(), err)
	}
	return out, nil
}
