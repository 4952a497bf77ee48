package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/pulsar"
)

// ErrInvalidRecord is wrapped by the error of Check: the record does not decode as the
// schema its route declares.
var ErrInvalidRecord = errors.New("record does not match the schema")

// Schema is one compiled schema configuration. It is immutable and safe for concurrent use.
type Schema struct {
	typ      string         // the configuration's type name
	info     *pulsar.Schema // what the producer declares; nil for none
	message  protoreflect.MessageDescriptor
	validate bool
	key      string // identifies the declaration
	desc     string
}

// The properties the Java client gives the SchemaInfo of a struct schema (a
// SchemaDefinition's defaults).
var structProperties = map[string]string{"__alwaysAllowNull": "true", "__jsr310ConversionEnabled": "false"}

// Compile builds a schema configuration (already checked by config.Validate): it reads
// the descriptor set or definition file and checks the message type or definition.
func Compile(c *config.Schema) (*Schema, error) {
	if c == nil {
		return nil, nil
	}
	s := &Schema{typ: c.Type, validate: c.Validate}
	if s.typ == "" {
		s.typ = "none"
	}
	switch s.typ {
	case "none":
		s.desc = "none"
		return s, nil
	case "string":
		s.info = &pulsar.Schema{Type: pulsar.SchemaString, Name: "String", Data: []byte{}}
		s.desc = "string"
	case "json", "avro":
		def := []byte(c.Definition)
		if c.File != "" {
			b, err := os.ReadFile(c.File)
			if err != nil {
				return nil, fmt.Errorf("file: %w", err)
			}
			def = b
		}
		name, err := checkAvroRecord(def)
		if err != nil {
			return nil, err
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, def) // checked above
		t := pulsar.SchemaAvro
		if s.typ == "json" {
			t = pulsar.SchemaJSON
		}
		s.info = &pulsar.Schema{Type: t, Data: compact.Bytes(), Properties: structProperties}
		s.desc = s.typ + " " + name
	case "protobuf_native":
		files := builtIn
		if c.DescriptorSet != "" {
			b, err := os.ReadFile(c.DescriptorSet)
			if err != nil {
				return nil, fmt.Errorf("descriptorSet: %w", err)
			}
			if files, err = loadFiles(b); err != nil {
				return nil, fmt.Errorf("descriptorSet %s: %w", c.DescriptorSet, err)
			}
		}
		md, err := findMessage(files, c.Message)
		if err != nil && c.DescriptorSet == "" {
			return nil, fmt.Errorf("message: %s is not a built-in type (%s); give a descriptorSet holding it", c.Message, strings.Join(BuiltIn, ", "))
		}
		if err != nil {
			return nil, fmt.Errorf("message: %w", err)
		}
		data, err := protobufNativeData(md)
		if err != nil {
			return nil, err
		}
		s.message = md
		s.info = &pulsar.Schema{Type: pulsar.SchemaProtobufNative, Data: data, Properties: structProperties}
		s.desc = "protobuf_native " + c.Message
	default:
		return nil, fmt.Errorf("type: %q is not a schema type", c.Type)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00", s.info.Type, s.info.Name)
	h.Write(s.info.Data)
	s.key = hex.EncodeToString(h.Sum(nil)[:12])
	return s, nil
}

// checkAvroRecord checks def is an Avro record definition and returns its full name.
func checkAvroRecord(def []byte) (string, error) {
	var rec struct {
		Type      any    `json:"type"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		Fields    []struct {
			Name string `json:"name"`
			Type any    `json:"type"`
		} `json:"fields"`
	}
	if err := json.Unmarshal(def, &rec); err != nil {
		return "", fmt.Errorf("definition: not a JSON Avro definition: %w", err)
	}
	if rec.Type != "record" {
		return "", fmt.Errorf(`definition: the Avro definition's type is %v; a schema definition is a "record"`, rec.Type)
	}
	if rec.Name == "" {
		return "", errors.New("definition: the Avro record has no name")
	}
	if rec.Fields == nil {
		return "", fmt.Errorf("definition: the Avro record %s has no fields list", rec.Name)
	}
	for i, f := range rec.Fields {
		if f.Name == "" || f.Type == nil {
			return "", fmt.Errorf("definition: field %d of the Avro record %s needs a name and a type", i, rec.Name)
		}
	}
	if rec.Namespace != "" && !strings.Contains(rec.Name, ".") {
		return rec.Namespace + "." + rec.Name, nil
	}
	return rec.Name, nil
}

// protobufNativeData is the SchemaInfo data of a PROTOBUF_NATIVE schema, as the Java
// client's ProtobufNativeSchema writes it: a JSON document holding the message's file and
// every file it imports as a FileDescriptorSet (base64), the message's full name and the
// name of its file.
func protobufNativeData(md protoreflect.MessageDescriptor) ([]byte, error) {
	var set descriptorpb.FileDescriptorSet
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		for i := 0; i < f.Imports().Len(); i++ {
			add(f.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(md.ParentFile())
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(&set)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		FileDescriptorSet      string `json:"fileDescriptorSet"`
		RootMessageTypeName    string `json:"rootMessageTypeName"`
		RootFileDescriptorName string `json:"rootFileDescriptorName"`
	}{base64.StdEncoding.EncodeToString(raw), string(md.FullName()), md.ParentFile().Path()})
}

// Info is what the producer declares: nil for none.
func (s *Schema) Info() *pulsar.Schema {
	if s == nil {
		return nil
	}
	return s.info
}

// Key identifies the declaration: producers of one topic with different schemas are
// different producers. "" for none.
func (s *Schema) Key() string {
	if s == nil {
		return ""
	}
	return s.key
}

// String names the schema for errors and logs: "protobuf_native mesos.v1.scheduler.Event".
func (s *Schema) String() string {
	if s == nil {
		return "none"
	}
	return s.desc
}

// Message is the protobuf message type of a protobuf_native schema, nil otherwise.
func (s *Schema) Message() protoreflect.MessageDescriptor {
	if s == nil {
		return nil
	}
	return s.message
}

// Validates reports whether records are checked against the schema.
func (s *Schema) Validates() bool { return s != nil && s.validate }

// Check reports, when the schema validates, whether a record decodes as the schema:
// protobuf_native records as the message type, json records as one JSON object in UTF-8
// (null is none), string records as UTF-8.
func (s *Schema) Check(data []byte) error {
	if !s.Validates() {
		return nil
	}
	switch s.typ {
	case "protobuf_native":
		m := dynamicpb.NewMessage(s.message)
		if err := (proto.UnmarshalOptions{}).Unmarshal(data, m); err != nil {
			return fmt.Errorf("%w %s: %w", ErrInvalidRecord, s.desc, err)
		}
	case "json":
		// json.Unmarshal refuses anything after the value but white space; a Decoder's
		// More does not see a stray ']' or '}' after it.
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			return fmt.Errorf("%w %s: not a JSON object: %w", ErrInvalidRecord, s.desc, err)
		}
		if obj == nil {
			// encoding/json decodes null into a map as no map at all.
			return fmt.Errorf("%w %s: not a JSON object: null", ErrInvalidRecord, s.desc)
		}
		if !utf8.Valid(data) {
			// encoding/json reads invalid UTF-8 in strings as U+FFFD; JSON is UTF-8.
			return fmt.Errorf("%w %s: not UTF-8", ErrInvalidRecord, s.desc)
		}
	case "string":
		if !utf8.Valid(data) {
			return fmt.Errorf("%w %s: not UTF-8", ErrInvalidRecord, s.desc)
		}
	}
	return nil
}

// Path compiles a field path of the schema's message type (protobuf_native only).
func (s *Schema) Path(path string) (*Path, error) { return CompilePath(s.Message(), path) }
