package schema

import (
	"encoding/base64"
	"math"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// wire builds protobuf records field by field, independently of the descriptors under
// test: the field numbers are the public Mesos v1 API's.
type wire []byte

func (w wire) str(num protowire.Number, s string) wire {
	return protowire.AppendString(protowire.AppendTag(w, num, protowire.BytesType), s)
}
func (w wire) msg(num protowire.Number, m wire) wire {
	return protowire.AppendBytes(protowire.AppendTag(w, num, protowire.BytesType), m)
}
func (w wire) varint(num protowire.Number, v uint64) wire {
	return protowire.AppendVarint(protowire.AppendTag(w, num, protowire.VarintType), v)
}
func (w wire) double(num protowire.Number, f float64) wire {
	return protowire.AppendFixed64(protowire.AppendTag(w, num, protowire.Fixed64Type), math.Float64bits(f))
}

func id(v string) wire { return wire(nil).str(1, v) }

// updateEvent is a scheduler UPDATE: type 1 = UPDATE (4), update 5 > status 1 with
// task_id 1, state 2, message 4, agent_id 5, timestamp 6, healthy 8, uuid 11; fields
// Mesos 1.11 does not define (a status field 50 and an event field 99 of a newer API)
// in between.
func updateEvent(task string, state uint64) []byte {
	status := wire(nil).msg(1, id(task)).varint(2, state).str(4, "ok").msg(5, id("agent-7")).
		msg(50, wire(nil).str(1, "unknown to the bridge")).double(6, 1.5e9).varint(8, 1).str(11, "\x00\x01\xfe")
	ev := wire(nil).varint(99, 12345).varint(1, 4).msg(5, wire(nil).msg(1, status))
	return ev
}

func mustPath(t testing.TB, msg, path string) *Path {
	t.Helper()
	md, err := findMessage(builtIn, msg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := CompilePath(md, path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPathReadsMesosFieldsFromWireBytes: paths read a scheduler UPDATE's fields by name
// (enums by name, bytes in base64, numbers in decimal), skipping fields they do not
// name, including ones the built-in types do not define.
func TestPathReadsMesosFieldsFromWireBytes(t *testing.T) {
	rec := updateEvent("task-1", 3) // TASK_FAILED
	for path, want := range map[string]string{
		"type":                         "UPDATE",
		"update.status.task_id.value":  "task-1",
		"update.status.state":          "TASK_FAILED",
		"update.status.agent_id.value": "agent-7",
		"update.status.message":        "ok",
		"update.status.timestamp":      "1.5e+09",
		"update.status.healthy":        "true",
		"update.status.uuid":           base64.StdEncoding.EncodeToString([]byte("\x00\x01\xfe")),
	} {
		got, ok := mustPath(t, "mesos.v1.scheduler.Event", path).Value(rec)
		if !ok || got != want {
			t.Errorf("%s: %q %v, want %q", path, got, ok, want)
		}
	}
	for _, path := range []string{"failure.agent_id.value", "update.status.executor_id.value", "update.status.reason"} {
		if got, ok := mustPath(t, "mesos.v1.scheduler.Event", path).Value(rec); ok {
			t.Errorf("%s: %q, want no value (the record does not hold it)", path, got)
		}
	}
}

// TestPathFollowsRepeatedAndRepeatedSingularFields: a number after a repeated field picks
// its element (the first without one), and a singular message written twice is merged,
// its last value winning, as a decoder does.
func TestPathFollowsRepeatedAndRepeatedSingularFields(t *testing.T) {
	offer := func(o string) wire { return wire(nil).msg(1, id(o)).msg(2, id("fw")).msg(3, id("a")).str(4, "host-"+o) }
	rec := wire(nil).varint(1, 2).msg(3, wire(nil).msg(1, offer("o-0")).msg(1, offer("o-1")))
	for path, want := range map[string]string{"offers.offers.id.value": "o-0", "offers.offers.1.hostname": "host-o-1", "offers.offers.0.id.value": "o-0"} {
		if got, ok := mustPath(t, "mesos.v1.scheduler.Event", path).Value(rec); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", path, got, ok, want)
		}
	}
	if got, ok := mustPath(t, "mesos.v1.scheduler.Event", "offers.offers.2.id.value").Value(rec); ok {
		t.Errorf("a third offer of two: %q", got)
	}
	twice := wire(nil).msg(5, wire(nil).msg(1, wire(nil).msg(1, id("first")))).msg(5, wire(nil).msg(1, wire(nil).varint(2, 1)))
	if got, ok := mustPath(t, "mesos.v1.scheduler.Event", "update.status.task_id.value").Value(twice); !ok || got != "first" {
		t.Errorf("merged update, task id: %q %v, want first", got, ok)
	}
	if got, ok := mustPath(t, "mesos.v1.scheduler.Event", "update.status.state").Value(twice); !ok || got != "TASK_RUNNING" {
		t.Errorf("merged update, state: %q %v, want TASK_RUNNING", got, ok)
	}
}

// TestCompilePathRefusesPathsThatCannotHaveAValue names the mistake: an unknown field,
// a path ending at a message, a field below a scalar, no message type.
func TestCompilePathRefusesPathsThatCannotHaveAValue(t *testing.T) {
	md, _ := findMessage(builtIn, "mesos.v1.scheduler.Event")
	for path, want := range map[string]string{
		"update.status.task":        `mesos.v1.TaskStatus has no field "task"`,
		"update.status":             "ends at the message mesos.v1.TaskStatus",
		"type.value":                "below a field that is not a message",
		"offers.offers.-1.id.value": "a negative index",
	} {
		if _, err := CompilePath(md, path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	if _, err := CompilePath(nil, "type"); err == nil {
		t.Error("a path without a message type compiled")
	}
}

// reference reads path the slow way: decoding the whole record with dynamicpb.
func reference(md protoreflect.MessageDescriptor, p *Path, data []byte) (string, bool, bool) {
	m := dynamicpb.NewMessage(md)
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(data, m); err != nil {
		return "", false, false
	}
	var cur protoreflect.Message = m
	for i, st := range p.steps {
		var v protoreflect.Value
		if st.repeated {
			l := cur.Get(st.fd).List()
			if st.index >= l.Len() {
				return "", false, true
			}
			v = l.Get(st.index)
		} else {
			if !cur.Has(st.fd) {
				return "", false, true
			}
			v = cur.Get(st.fd)
		}
		if i < len(p.steps)-1 {
			cur = v.Message()
			continue
		}
		switch st.fd.Kind() {
		case protoreflect.EnumKind:
			if ev := st.fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
				return string(ev.Name()), true, true
			}
			return strconv.FormatInt(int64(v.Enum()), 10), true, true
		case protoreflect.BytesKind:
			return base64.StdEncoding.EncodeToString(v.Bytes()), true, true
		case protoreflect.FloatKind:
			return strconv.FormatFloat(v.Float(), 'g', -1, 32), true, true
		case protoreflect.DoubleKind:
			return strconv.FormatFloat(v.Float(), 'g', -1, 64), true, true
		}
		return v.String(), true, true
	}
	return "", false, true
}

var fuzzPaths = []struct{ msg, path string }{
	{"mesos.v1.scheduler.Event", "type"},
	{"mesos.v1.scheduler.Event", "update.status.task_id.value"},
	{"mesos.v1.scheduler.Event", "update.status.state"},
	{"mesos.v1.scheduler.Event", "update.status.timestamp"},
	{"mesos.v1.scheduler.Event", "update.status.uuid"},
	{"mesos.v1.scheduler.Event", "update.status.healthy"},
	{"mesos.v1.scheduler.Event", "offers.offers.1.id.value"},
	{"mesos.v1.scheduler.Event", "failure.status"},
	{"mesos.v1.scheduler.Event", "subscribed.master_info.port"},
	{"mesos.v1.scheduler.Call", "framework_id.value"},
	{"mesos.v1.scheduler.Call", "subscribe.framework_info.roles.1"},
	{"mesos.v1.scheduler.Call", "subscribe.framework_info.failover_timeout"},
	{"mesos.v1.master.Event", "task_updated.state"},
	{"mesos.v1.master.Event", "task_added.task.statuses.0.state"},
	{"mesos.v1.executor.Event", "launch.task.task_id.value"},
}

// FuzzPathValue holds the wire-level field extraction against a full decode: for every
// record the decoder accepts, each path gives the decoder's value (or none when it has
// none); for any input it neither panics nor reads out of bounds.
func FuzzPathValue(f *testing.F) {
	f.Add(updateEvent("task-1", 3))
	f.Add([]byte(wire(nil).varint(1, 2).msg(3, wire(nil).msg(1, wire(nil).msg(1, id("o"))).msg(1, wire(nil).msg(1, id("p"))))))
	f.Add([]byte(wire(nil).msg(1, id("fw")).varint(2, 1).msg(3, wire(nil).msg(1, wire(nil).str(1, "u").str(2, "n").str(12, "r0").str(12, "r1").double(4, 3)))))
	f.Add([]byte(wire(nil).varint(1, 3).msg(4, wire(nil).msg(1, id("fw")).msg(2, wire(nil).msg(1, id("t")).varint(2, 99)).varint(3, 2))))
	f.Add([]byte{0x08, 0x96, 0x01, 0x2a, 0x03, 0x0a, 0x01, 0x0a})
	type compiled struct {
		md protoreflect.MessageDescriptor
		p  *Path
	}
	var ps []compiled
	for _, fp := range fuzzPaths {
		md, err := findMessage(builtIn, fp.msg)
		if err != nil {
			f.Fatal(err)
		}
		p, err := CompilePath(md, fp.path)
		if err != nil {
			f.Fatal(err)
		}
		ps = append(ps, compiled{md, p})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range ps {
			got, ok := c.p.Value(data)
			want, wok, decoded := reference(c.md, c.p, data)
			if decoded && (ok != wok || got != want) {
				t.Fatalf("%s %s: %q %v, the decoder's %q %v", c.md.FullName(), c.p, got, ok, want, wok)
			}
		}
	})
}
