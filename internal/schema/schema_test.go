package schema

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestProtobufNativeSchemaIsTheJavaClientsDocument: the PROTOBUF_NATIVE data holds, as
// the Java client's ProtobufNativeSchema writes it, the message's file and every file it
// imports (imports first) and the root message and file names, so the broker and typed
// consumers can build the message type; and it converts a record back to JSON.
func TestProtobufNativeSchemaIsTheJavaClientsDocument(t *testing.T) {
	s, err := Compile(&config.Schema{Type: "protobuf_native", Message: "mesos.v1.scheduler.Event"})
	if err != nil {
		t.Fatal(err)
	}
	info := s.Info()
	if info.Type != pulsar.SchemaProtobufNative || info.Name != "" || info.Properties["__alwaysAllowNull"] != "true" {
		t.Fatalf("SchemaInfo %v %q %v", info.Type, info.Name, info.Properties)
	}
	var doc map[string]string
	if err := json.Unmarshal(info.Data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc) != 3 || doc["rootMessageTypeName"] != "mesos.v1.scheduler.Event" || doc["rootFileDescriptorName"] != "mesos/v1/scheduler/scheduler.proto" {
		t.Fatalf("document %v", doc)
	}
	raw, err := base64.StdEncoding.DecodeString(doc["fileDescriptorSet"])
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.File) != 2 || set.File[0].GetName() != "mesos/v1/mesos.proto" || set.File[1].GetName() != "mesos/v1/scheduler/scheduler.proto" {
		t.Fatalf("files %v, want mesos.proto then scheduler.proto", set.File)
	}
	conv, err := NewConverter(info)
	if err != nil {
		t.Fatal(err)
	}
	out, err := conv.JSON(wire(nil).varint(1, 4).msg(5, wire(nil).msg(1, wire(nil).msg(1, id("t-1")).varint(2, 1))))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Type   string
		Update struct {
			Status struct {
				TaskID struct{ Value string } `json:"task_id"`
				State  string
			}
		}
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Type != "UPDATE" || v.Update.Status.TaskID.Value != "t-1" || v.Update.Status.State != "TASK_RUNNING" {
		t.Fatalf("converted %s (%v)", out, err)
	}
	if _, err := conv.JSON([]byte{0xff}); !errors.Is(err, ErrNotConvertible) {
		t.Fatalf("a record that does not decode: %v, want ErrNotConvertible", err)
	}
	if _, err := NewConverter(&pulsar.Schema{Type: pulsar.SchemaAvro}); err != nil {
		t.Fatal(err)
	}
}

// TestConverterRefusesARecordMissingARequiredFieldAsNotConvertible: a record that decodes
// but lacks a proto2 required field (an UPDATE whose status has no task_id) cannot be
// given as protojson; the error says so as every other unconvertible record's does.
func TestConverterRefusesARecordMissingARequiredFieldAsNotConvertible(t *testing.T) {
	s, err := Compile(&config.Schema{Type: "protobuf_native", Message: "mesos.v1.scheduler.Event"})
	if err != nil {
		t.Fatal(err)
	}
	conv, err := NewConverter(s.Info())
	if err != nil {
		t.Fatal(err)
	}
	partial := wire(nil).varint(1, 4).msg(5, wire(nil).msg(1, wire(nil).varint(2, 1)))
	if out, err := conv.JSON(partial); !errors.Is(err, ErrNotConvertible) {
		t.Fatalf("a record without a required field: %s, %v; want ErrNotConvertible", out, err)
	}
}

// TestJSONSchemaValidationRefusesNullAndInvalidUTF8: a json schema that validates takes
// one JSON object in UTF-8; null (which encoding/json decodes into a map as no map), a
// string holding bytes that are not UTF-8 (which it reads as U+FFFD) and an object
// followed by anything but white space are refused.
func TestJSONSchemaValidationRefusesNullAndInvalidUTF8(t *testing.T) {
	s, err := Compile(&config.Schema{Type: "json", Definition: `{"type":"record","name":"E","fields":[{"name":"a","type":"string"}]}`, Validate: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check([]byte(`{"a":"é"}`)); err != nil {
		t.Fatalf("a JSON object: %v", err)
	}
	for _, rec := range []string{"null", " null ", "{\"a\":\"\xff\xfe\"}", "{\"\xc3\":1}",
		// An object followed by a closing bracket or brace is not JSON (a record cut
		// from a larger document), nor are two values.
		`{"a":"x"}}`, `{"a":"x"}]`, `{"a":"x"} {}`} {
		if err := s.Check([]byte(rec)); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%q: %v, want ErrInvalidRecord", rec, err)
		}
	}
}

// TestConverterGivesStringAndJSONRecordsAsJSON: converted to JSON, a string topic's
// record is a JSON string (quotes, escapes), not its bare text; a JSON topic's record is
// served as stored when it is JSON in UTF-8; records that are neither are not
// convertible.
func TestConverterGivesStringAndJSONRecordsAsJSON(t *testing.T) {
	str, err := NewConverter(&pulsar.Schema{Type: pulsar.SchemaString})
	if err != nil {
		t.Fatal(err)
	}
	out, err := str.JSON([]byte("task \"t-1\" failed\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := json.Unmarshal(out, &got); err != nil || got != "task \"t-1\" failed\n" {
		t.Fatalf("a string record as JSON: %s (%v)", out, err)
	}
	if out, err := str.JSON([]byte("\xff")); !errors.Is(err, ErrNotConvertible) {
		t.Errorf("a string record that is not UTF-8: %q, %v; want ErrNotConvertible", out, err)
	}
	js, err := NewConverter(&pulsar.Schema{Type: pulsar.SchemaJSON})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := js.JSON([]byte(`{"a":1}`)); err != nil || string(out) != `{"a":1}` {
		t.Errorf("a JSON record: %s, %v", out, err)
	}
	for _, rec := range []string{"not json", "{\"a\":\"\xff\"}"} {
		if out, err := js.JSON([]byte(rec)); !errors.Is(err, ErrNotConvertible) {
			t.Errorf("%q: %q, %v; want ErrNotConvertible", rec, out, err)
		}
	}
}
