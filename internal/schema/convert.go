package schema

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
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
	// types resolves the extensions the schema's descriptor set declares: their fields
	// are the schema's, decoded and given in JSON ("[pkg.name]") like any other.
	types *dynamicpb.Types
	typ   pulsar.SchemaType
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
	return &Converter{message: md, types: dynamicpb.NewTypes(files), typ: s.Type}, nil
}

// JSON gives a record as JSON: a protobuf record as protojson (the .proto's field names,
// enums by name), a JSON topic's record as stored, a string topic's as a JSON string.
// Nothing is dropped on the way: a protobuf record carrying fields (or enum values) its
// schema does not define, which protojson would leave out, is not convertible, and the
// error names where they are; so is a JSON record that is not JSON and a string record
// that is not UTF-8.
func (c *Converter) JSON(payload []byte) ([]byte, error) {
	if c.message == nil {
		switch c.typ {
		case pulsar.SchemaAvro:
			return nil, fmt.Errorf("%w: the topic's records are Avro binary", ErrNotConvertible)
		case pulsar.SchemaString:
			if !utf8.Valid(payload) {
				return nil, fmt.Errorf("%w: the record of the string schema is not UTF-8", ErrNotConvertible)
			}
			return json.Marshal(string(payload))
		}
		if !utf8.Valid(payload) || !json.Valid(payload) {
			return nil, fmt.Errorf("%w: the record of the JSON schema is not JSON in UTF-8", ErrNotConvertible)
		}
		return payload, nil
	}
	m := dynamicpb.NewMessage(c.message)
	if err := (proto.UnmarshalOptions{AllowPartial: true, Resolver: c.types}).Unmarshal(payload, m); err != nil {
		return nil, fmt.Errorf("%w: not a %s: %w", ErrNotConvertible, c.message.FullName(), err)
	}
	if unknown := c.unknownFields(m, "", nil); len(unknown) > 0 {
		more := ""
		if len(unknown) > maxUnknownNamed {
			more = fmt.Sprintf(" and %d more", len(unknown)-maxUnknownNamed)
			unknown = unknown[:maxUnknownNamed]
		}
		return nil, fmt.Errorf("%w: the %s carries fields its schema does not define, which JSON cannot hold (a newer or a different definition?): %s%s",
			ErrNotConvertible, c.message.FullName(), strings.Join(unknown, ", "), more)
	}
	out, err := protojson.MarshalOptions{UseProtoNames: true, Resolver: c.types}.Marshal(m)
	if err != nil {
		// A record that decodes but lacks a required field (proto2), which protojson
		// (like the Java client's parser) refuses.
		return nil, fmt.Errorf("%w: not a whole %s: %w", ErrNotConvertible, c.message.FullName(), err)
	}
	return out, nil
}

// maxUnknownNamed bounds the unknown fields an error names.
const maxUnknownNamed = 8

// unknownFields lists, depth first, the fields of m and the messages it holds that m's
// type does not define, each as "PATH field N (wire type)": PATH is the field path from
// the record's root ("" for the root itself, list items by index, map values by key).
// The value of a google.protobuf.Any is looked into as its type (protojson gives it
// expanded, and would leave out what its type does not define), at the Any's path.
func (c *Converter) unknownFields(m protoreflect.Message, path string, out []string) []string {
	if m.Descriptor().FullName() == "google.protobuf.Any" {
		if v := c.anyValue(m); v != nil {
			out = c.unknownFields(v, path, out)
		}
	}
	for b := m.GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		v := protowire.ConsumeFieldValue(num, typ, b)
		if v < 0 {
			break
		}
		b = b[v:]
		where := "field"
		if path != "" {
			where = path + " field"
		}
		out = append(out, fmt.Sprintf("%s %d (%s)", where, num, wireTypeName(typ)))
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		if path != "" {
			name = path + "." + name
		}
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				out = c.unknownFields(mv.Message(), fmt.Sprintf("%s[%v]", name, k.Interface()), out)
				return true
			})
		case fd.IsList():
			if fd.Message() == nil {
				return true
			}
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				out = c.unknownFields(l.Get(i).Message(), name+"."+strconv.Itoa(i), out)
			}
		case fd.Message() != nil:
			out = c.unknownFields(v.Message(), name, out)
		}
		return true
	})
	return out
}

// anyValue decodes the value of an Any as the type its type_url names, as protojson
// does; nil when that cannot be done (protojson then refuses the record itself).
func (c *Converter) anyValue(m protoreflect.Message) protoreflect.Message {
	fields := m.Descriptor().Fields()
	url, value := fields.ByNumber(1), fields.ByNumber(2)
	if url == nil || value == nil || url.Kind() != protoreflect.StringKind || value.Kind() != protoreflect.BytesKind {
		return nil
	}
	mt, err := c.types.FindMessageByURL(m.Get(url).String())
	if err != nil {
		return nil
	}
	v := mt.New()
	if err := (proto.UnmarshalOptions{AllowPartial: true, Resolver: c.types}).Unmarshal(m.Get(value).Bytes(), v.Interface()); err != nil {
		return nil
	}
	return v
}

func wireTypeName(t protowire.Type) string {
	switch t {
	case protowire.VarintType:
		return "varint"
	case protowire.Fixed32Type:
		return "fixed32"
	case protowire.Fixed64Type:
		return "fixed64"
	case protowire.BytesType:
		return "length-delimited"
	case protowire.StartGroupType:
		return "group"
	}
	return "wire type " + strconv.Itoa(int(t))
}
