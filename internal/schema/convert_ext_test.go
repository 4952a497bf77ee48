package schema

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/recordio-bridge/bridge/pulsar"
)

// extensionSchema is a user's PROTOBUF_NATIVE schema (proto2) whose root message has an
// extension range and whose file declares an extension of it:
//
//	message Base { optional int32 a = 1; extensions 100 to 199; }
//	extend Base { optional string note = 100; }
func extensionSchema(t *testing.T) *pulsar.Schema {
	t.Helper()
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("ext/base.proto"), Package: proto.String("ext"), Syntax: proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Base"),
			Field: []*descriptorpb.FieldDescriptorProto{{Name: proto.String("a"), Number: proto.Int32(1),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum()}},
			ExtensionRange: []*descriptorpb.DescriptorProto_ExtensionRange{{Start: proto.Int32(100), End: proto.Int32(200)}},
		}},
		Extension: []*descriptorpb.FieldDescriptorProto{{Name: proto.String("note"), Number: proto.Int32(100), Extendee: proto.String(".ext.Base"),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()}},
	}
	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{fd}})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(map[string]string{"fileDescriptorSet": base64.StdEncoding.EncodeToString(set),
		"rootMessageTypeName": "ext.Base", "rootFileDescriptorName": "ext/base.proto"})
	if err != nil {
		t.Fatal(err)
	}
	return &pulsar.Schema{Type: pulsar.SchemaProtobufNative, Data: doc}
}

// TestConverterGivesExtensionsTheSchemaDeclares: a field of an extension range that an
// extension of the schema's own descriptor set defines is part of the schema: it is
// given in JSON (as protojson names an extension, "[ext.note]"), not refused as a field
// the schema does not define; a number of the range no extension declares still is.
func TestConverterGivesExtensionsTheSchemaDeclares(t *testing.T) {
	conv, err := NewConverter(extensionSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := conv.JSON(wire(nil).varint(1, 7).str(100, "hi"))
	if err != nil {
		t.Fatalf("a record with a declared extension: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil || v["a"] != float64(7) || v["[ext.note]"] != "hi" {
		t.Fatalf("converted %s (%v), want a: 7 and [ext.note]: hi", out, err)
	}
	if out, err := conv.JSON(wire(nil).varint(1, 7).str(101, "x")); !errors.Is(err, ErrNotConvertible) {
		t.Fatalf("a record with an undeclared field of the range: %s, %v; want ErrNotConvertible", out, err)
	}
}
