package schema

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/recordio-bridge/bridge/config"
)

// TestMesosProtoFilesAreMesos111Verbatim: the .proto files the built-in types are
// compiled from are Apache Mesos 1.11.0's, byte for byte: each hashes to the git blob
// the Mesos repository holds at tag 1.11.0 (mesosproto/README.md), so an edit by hand is
// caught here.
func TestMesosProtoFilesAreMesos111Verbatim(t *testing.T) {
	for file, blob := range map[string]string{
		"mesos/v1/mesos.proto":                   "ad7092ecf51d37036e5ccc7f9b397a4abd5ed6d8",
		"mesos/v1/scheduler/scheduler.proto":     "a8596b6c85e12d7d10c3b4706ba84eb0ea647d77",
		"mesos/v1/executor/executor.proto":       "51fa66d4231e5f3aff96be6867ab204f92c549de",
		"mesos/v1/master/master.proto":           "67352286a4aad68d686a2b49d039f49346e516c3",
		"mesos/v1/allocator/allocator.proto":     "0958bb74c743474acf723f0ea8da917e8cf8fa12",
		"mesos/v1/maintenance/maintenance.proto": "9ae8715c1a2fb731874c823bf4f63abd892e8898",
		"mesos/v1/quota/quota.proto":             "d9d2b3b3860e2ca85f1bcadc015bd25b3f68db77",
	} {
		b, err := os.ReadFile(filepath.Join("mesosproto", file))
		if err != nil {
			t.Fatal(err)
		}
		h := sha1.New()
		fmt.Fprintf(h, "blob %d\x00", len(b))
		h.Write(b)
		if got := hex.EncodeToString(h.Sum(nil)); got != blob {
			t.Errorf("%s: git blob %s, want Mesos 1.11.0's %s", file, got, blob)
		}
	}
	// Every file of the embedded set is one of them (or protobuf's own duration.proto).
	files := 0
	builtIn.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		files++
		if p := fd.Path(); p != "google/protobuf/duration.proto" {
			if _, err := os.Stat(filepath.Join("mesosproto", p)); err != nil {
				t.Errorf("mesos.pb holds %s, which mesosproto does not: %v", p, err)
			}
		}
		return true
	})
	if files != 8 {
		t.Errorf("mesos.pb holds %d files, want the 7 Mesos files and duration.proto", files)
	}
}

func builtInConverter(t *testing.T, message string) *Converter {
	t.Helper()
	s, err := Compile(&config.Schema{Type: "protobuf_native", Message: message, Validate: true})
	if err != nil {
		t.Fatal(err)
	}
	conv, err := NewConverter(s.Info())
	if err != nil {
		t.Fatal(err)
	}
	return conv
}

// toMap converts rec with the built-in type's schema as egress does and decodes the JSON.
func toMap(t *testing.T, message string, rec []byte) map[string]any {
	t.Helper()
	out, err := builtInConverter(t, message).JSON(rec)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	return v
}

// get walks decoded JSON by a dotted path (list items by index).
func get(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			var i int
			if _, err := fmt.Sscan(k, &i); err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// TestInverseOfferHasTheAPIsFieldNumbers: an INVERSE_OFFERS event as the Mesos v1 API
// encodes it (InverseOffer: id 1, url 2, framework_id 3 required, agent_id 4 optional,
// unavailability 5) gives the agent by its path and in JSON, and one without an agent
// is a valid record.
func TestInverseOfferHasTheAPIsFieldNumbers(t *testing.T) {
	unavail := wire(nil).msg(1, wire(nil).varint(1, 1700000000000000000)).msg(2, wire(nil).varint(1, 3600000000000))
	offer := wire(nil).msg(1, id("io-1")).msg(3, id("fw-1")).msg(4, id("agent-1")).msg(5, unavail)
	rec := wire(nil).varint(1, 9).msg(9, wire(nil).msg(1, offer))
	for path, want := range map[string]string{
		"inverse_offers.inverse_offers.agent_id.value":     "agent-1",
		"inverse_offers.inverse_offers.framework_id.value": "fw-1",
		"inverse_offers.inverse_offers.id.value":           "io-1",
	} {
		if got, ok := mustPath(t, "mesos.v1.scheduler.Event", path).Value(rec); !ok || got != want {
			t.Errorf("%s = %q %v, want %q", path, got, ok, want)
		}
	}
	v := toMap(t, "mesos.v1.scheduler.Event", rec)
	io := get(v, "inverse_offers.inverse_offers.0")
	if get(io, "agent_id.value") != "agent-1" || get(io, "framework_id.value") != "fw-1" ||
		get(io, "unavailability.start.nanoseconds") != "1700000000000000000" || get(io, "unavailability.duration.nanoseconds") != "3600000000000" {
		t.Errorf("the inverse offer as JSON: %v", io)
	}
	s, err := Compile(&config.Schema{Type: "protobuf_native", Message: "mesos.v1.scheduler.Event", Validate: true})
	if err != nil {
		t.Fatal(err)
	}
	noAgent := wire(nil).varint(1, 9).msg(9, wire(nil).msg(1, wire(nil).msg(1, id("io-2")).msg(3, id("fw-1")).msg(5, unavail)))
	if err := s.Check(noAgent); err != nil {
		t.Errorf("an inverse offer without an agent (agent_id is optional): %v", err)
	}
	noFramework := wire(nil).varint(1, 9).msg(9, wire(nil).msg(1, wire(nil).msg(1, id("io-3")).msg(4, id("agent-1")).msg(5, unavail)))
	if err := s.Check(noFramework); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("an inverse offer without its framework (framework_id is required): %v", err)
	}
}

// TestOperationStatusUUIDIsTheAPIsUUIDMessage: OperationStatus.uuid is the API's UUID
// message (field 5, its value bytes field 1): the path status.uuid.value reads it and
// JSON gives it as an object holding the value.
func TestOperationStatusUUIDIsTheAPIsUUIDMessage(t *testing.T) {
	u := "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10"
	status := wire(nil).msg(1, id("op-1")).varint(2, 2).msg(5, wire(nil).str(1, u)).msg(6, id("agent-1"))
	rec := wire(nil).varint(1, 11).msg(11, wire(nil).msg(1, status))
	want := base64.StdEncoding.EncodeToString([]byte(u))
	if got, ok := mustPath(t, "mesos.v1.scheduler.Event", "update_operation_status.status.uuid.value").Value(rec); !ok || got != want {
		t.Errorf("update_operation_status.status.uuid.value = %q %v, want %q", got, ok, want)
	}
	v := toMap(t, "mesos.v1.scheduler.Event", rec)
	st := get(v, "update_operation_status.status")
	if get(st, "uuid.value") != want || get(st, "state") != "OPERATION_FINISHED" || get(st, "agent_id.value") != "agent-1" {
		t.Errorf("the operation status as JSON: %v", st)
	}
}

// TestConverterCarriesEveryFieldOfAnOffer: an OFFERS event's offers come out as JSON with
// their resources (scalar, ranges, reservations), attributes, executor ids, URL and
// domain: everything the API defines, not only what routing reads.
func TestConverterCarriesEveryFieldOfAnOffer(t *testing.T) {
	cpus := wire(nil).str(1, "cpus").varint(2, 0).msg(3, wire(nil).double(1, 4)).
		msg(13, wire(nil).varint(4, 1).str(3, "web")) // reservations: STATIC for role web
	ports := wire(nil).str(1, "ports").varint(2, 1).msg(4, wire(nil).msg(1, wire(nil).varint(1, 31000).varint(2, 32000)))
	rack := wire(nil).str(1, "rack").varint(2, 3).msg(5, wire(nil).str(1, "r1"))
	url := wire(nil).str(1, "http").msg(2, wire(nil).str(1, "agent-1.example").varint(3, 5051)).str(3, "/slave(1)")
	offer := wire(nil).msg(1, id("o-1")).msg(2, id("fw-1")).msg(3, id("agent-1")).str(4, "agent-1.example").
		msg(5, cpus).msg(5, ports).msg(6, id("exec-1")).msg(7, rack).msg(8, url)
	rec := wire(nil).varint(1, 2).msg(3, wire(nil).msg(1, offer))
	o := get(toMap(t, "mesos.v1.scheduler.Event", rec), "offers.offers.0")
	for path, want := range map[string]any{
		"id.value":                         "o-1",
		"hostname":                         "agent-1.example",
		"resources.0.name":                 "cpus",
		"resources.0.type":                 "SCALAR",
		"resources.0.scalar.value":         4.0,
		"resources.0.reservations.0.type":  "STATIC",
		"resources.0.reservations.0.role":  "web",
		"resources.1.ranges.range.0.begin": "31000",
		"resources.1.ranges.range.0.end":   "32000",
		"executor_ids.0.value":             "exec-1",
		"attributes.0.name":                "rack",
		"attributes.0.text.value":          "r1",
		"url.address.port":                 5051.0,
		"url.path":                         "/slave(1)",
	} {
		if got := get(o, path); got != want {
			t.Errorf("offers.offers.0.%s = %v (%T), want %v", path, got, got, want)
		}
	}
}

// TestConverterRefusesFieldsTheSchemaDoesNotDefineNamingThem: a record carrying fields
// its schema does not define (a newer API, or records of another type) is not converted
// with them left out: the error names each, with where it is.
func TestConverterRefusesFieldsTheSchemaDoesNotDefineNamingThem(t *testing.T) {
	out, err := builtInConverter(t, "mesos.v1.scheduler.Event").JSON(updateEvent("t-1", 1))
	if !errors.Is(err, ErrNotConvertible) {
		t.Fatalf("converted %s, %v; want ErrNotConvertible", out, err)
	}
	for _, want := range []string{"field 99 (varint)", "update.status field 50 (length-delimited)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: does not name %q", err, want)
		}
	}
	// An enum value the schema does not define is not left out either: it comes as its number.
	unknownState := wire(nil).varint(1, 4).msg(5, wire(nil).msg(1, wire(nil).msg(1, id("t-1")).varint(2, 77)))
	if got := get(toMap(t, "mesos.v1.scheduler.Event", unknownState), "update.status.state"); got != 77.0 {
		t.Errorf("a task state Mesos 1.11 does not define: %v, want 77", got)
	}
	// In a list item, named by its index.
	offers := wire(nil).varint(1, 2).msg(3, wire(nil).msg(1, wire(nil).msg(1, id("o-1")).msg(2, id("f")).msg(3, id("a")).str(4, "h")).
		msg(1, wire(nil).msg(1, id("o-2")).msg(2, id("f")).msg(3, id("a")).str(4, "h").varint(40, 1)))
	if _, err := builtInConverter(t, "mesos.v1.scheduler.Event").JSON(offers); err == nil || !strings.Contains(err.Error(), "offers.offers.1 field 40 (varint)") {
		t.Errorf("an offer with a field Mesos 1.11 does not define: %v", err)
	}
}

// FuzzConverterJSONLosesNothing: whatever the bytes, converting them as a scheduler
// event either fails or gives JSON that parses back into the same message: nothing
// the record held is left out.
func FuzzConverterJSONLosesNothing(f *testing.F) {
	f.Add([]byte(updateEvent("t-1", 1)))
	f.Add([]byte(wire(nil).varint(1, 9).msg(9, wire(nil).msg(1, wire(nil).msg(1, id("io")).msg(3, id("fw")).msg(4, id("a")).msg(5, wire(nil).msg(1, wire(nil).varint(1, 5)))))))
	f.Add([]byte(wire(nil).varint(1, 2).msg(3, wire(nil).msg(1, wire(nil).msg(1, id("o")).msg(2, id("f")).msg(3, id("a")).str(4, "h").msg(5, wire(nil).str(1, "cpus").varint(2, 0).msg(3, wire(nil).double(1, 1)))))))
	s, err := Compile(&config.Schema{Type: "protobuf_native", Message: "mesos.v1.scheduler.Event"})
	if err != nil {
		f.Fatal(err)
	}
	conv, err := NewConverter(s.Info())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		out, err := conv.JSON(rec)
		if err != nil {
			if !errors.Is(err, ErrNotConvertible) {
				t.Fatalf("%v: not ErrNotConvertible", err)
			}
			return
		}
		orig := dynamicpb.NewMessage(s.Message())
		if err := proto.Unmarshal(rec, orig); err != nil {
			t.Fatalf("converted %x, which does not decode: %v", rec, err)
		}
		back := dynamicpb.NewMessage(s.Message())
		if err := protojson.Unmarshal(out, back); err != nil {
			t.Fatalf("the JSON %s does not parse back: %v", out, err)
		}
		if !proto.Equal(orig, back) {
			t.Fatalf("the JSON %s holds less or other than the record %x", out, rec)
		}
	})
}
