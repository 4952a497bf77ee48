package schema

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/recordio-bridge/bridge/pulsar"
)

// anySchema is a user's PROTOBUF_NATIVE schema whose root message holds a
// google.protobuf.Any (its file in the set, as the Java client writes it):
//
//	message Inner { optional string s = 1; }
//	message Outer { optional google.protobuf.Any payload = 1; }
func anySchema(t *testing.T) *pulsar.Schema {
	t.Helper()
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("ext/outer.proto"), Package: proto.String("ext"), Syntax: proto.String("proto2"),
		Dependency: []string{"google/protobuf/any.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Inner"),
			Field: []*descriptorpb.FieldDescriptorProto{{Name: proto.String("s"), Number: proto.Int32(1),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()}},
		}, {
			Name: proto.String("Outer"),
			Field: []*descriptorpb.FieldDescriptorProto{{Name: proto.String("payload"), Number: proto.Int32(1),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(),
				TypeName: proto.String(".google.protobuf.Any")}},
		}},
	}
	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(anypb.File_google_protobuf_any_proto), fd}})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(map[string]string{"fileDescriptorSet": base64.StdEncoding.EncodeToString(set),
		"rootMessageTypeName": "ext.Outer", "rootFileDescriptorName": "ext/outer.proto"})
	if err != nil {
		t.Fatal(err)
	}
	return &pulsar.Schema{Type: pulsar.SchemaProtobufNative, Data: doc}
}

// TestConverterLooksIntoAnyValues: a google.protobuf.Any of a type the schema's set
// defines is given in JSON expanded ("@type" and the value's fields); a value carrying
// fields its type does not define is refused, naming them, as anywhere else in the
// record, instead of being given without them.
func TestConverterLooksIntoAnyValues(t *testing.T) {
	conv, err := NewConverter(anySchema(t))
	if err != nil {
		t.Fatal(err)
	}
	packed := func(inner wire) wire {
		return wire(nil).msg(1, wire(nil).str(1, "type.googleapis.com/ext.Inner").msg(2, inner))
	}
	out, err := conv.JSON(packed(wire(nil).str(1, "x")))
	if err != nil {
		t.Fatalf("an Any of a type the set defines: %v", err)
	}
	var v map[string]map[string]any
	if err := json.Unmarshal(out, &v); err != nil || v["payload"]["@type"] != "type.googleapis.com/ext.Inner" || v["payload"]["s"] != "x" {
		t.Fatalf("converted %s (%v)", out, err)
	}
	out, err = conv.JSON(packed(wire(nil).str(1, "x").varint(9, 1)))
	if !errors.Is(err, ErrNotConvertible) || !strings.Contains(err.Error(), "payload field 9 (varint)") {
		t.Fatalf("an Any whose value carries a field its type does not define: %s, %v; want ErrNotConvertible naming payload field 9", out, err)
	}
}
