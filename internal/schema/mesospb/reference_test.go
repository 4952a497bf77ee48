package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	gogoproto "github.com/gogo/protobuf/proto"
	_ "github.com/mesos/mesos-go/api/v1/lib"
	_ "github.com/mesos/mesos-go/api/v1/lib/allocator"
	_ "github.com/mesos/mesos-go/api/v1/lib/executor"
	_ "github.com/mesos/mesos-go/api/v1/lib/maintenance"
	_ "github.com/mesos/mesos-go/api/v1/lib/master"
	_ "github.com/mesos/mesos-go/api/v1/lib/quota"
	_ "github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The paths the bridge's built-in types and their sources live at, from this module.
const (
	include  = "../mesosproto"
	embedded = "../mesos.pb"
)

var roots = []string{"mesos.v1.scheduler.Event", "mesos.v1.scheduler.Call", "mesos.v1.executor.Event", "mesos.v1.master.Event"}

// field is what the comparison holds of a field: name, number, label, type and, for a
// message or enum, its type's full name (package-neutral: mesos.v1.X and mesos-go's
// mesos.X are both mesos.X).
type field struct {
	Name     string
	Number   int32
	Label    descriptorpb.FieldDescriptorProto_Label
	Type     descriptorpb.FieldDescriptorProto_Type
	TypeName string
}

func (f field) String() string {
	s := fmt.Sprintf("%s %s %s = %d", strings.ToLower(strings.TrimPrefix(f.Label.String(), "LABEL_")),
		strings.ToLower(strings.TrimPrefix(f.Type.String(), "TYPE_")), f.Name, f.Number)
	if f.TypeName != "" {
		s += " (" + f.TypeName + ")"
	}
	return s
}

// types is a set of files' messages (fields by number) and enums (value names by number),
// by package-neutral full name.
type types struct {
	messages map[string]map[int32]field
	enums    map[string]map[int32]string
}

func neutral(name string) string {
	name = strings.TrimPrefix(name, ".")
	if rest, ok := strings.CutPrefix(name, "mesos.v1."); ok {
		return "mesos." + rest
	}
	return name
}

func collect(files []*descriptorpb.FileDescriptorProto) types {
	t := types{messages: map[string]map[int32]field{}, enums: map[string]map[int32]string{}}
	addEnum := func(prefix string, e *descriptorpb.EnumDescriptorProto) {
		vals := map[int32]string{}
		for _, v := range e.GetValue() {
			vals[v.GetNumber()] = v.GetName()
		}
		t.enums[neutral(prefix+"."+e.GetName())] = vals
	}
	var addMsg func(prefix string, m *descriptorpb.DescriptorProto)
	addMsg = func(prefix string, m *descriptorpb.DescriptorProto) {
		name := prefix + "." + m.GetName()
		fields := map[int32]field{}
		for _, f := range m.GetField() {
			fields[f.GetNumber()] = field{f.GetName(), f.GetNumber(), f.GetLabel(), f.GetType(), neutral(f.GetTypeName())}
		}
		t.messages[neutral(name)] = fields
		for _, n := range m.GetNestedType() {
			addMsg(name, n)
		}
		for _, e := range m.GetEnumType() {
			addEnum(name, e)
		}
	}
	for _, f := range files {
		for _, m := range f.GetMessageType() {
			addMsg(f.GetPackage(), m)
		}
		for _, e := range f.GetEnumType() {
			addEnum(f.GetPackage(), e)
		}
	}
	return t
}

// reach lists the messages and enums t's roots reach through their fields, sorted.
func (t types) reach(roots []string) (messages, enums []string) {
	seen := map[string]bool{}
	var walk func(name string)
	walk = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		if _, ok := t.enums[name]; ok {
			enums = append(enums, name)
			return
		}
		messages = append(messages, name)
		for _, f := range t.messages[name] {
			if f.TypeName != "" {
				walk(f.TypeName)
			}
		}
	}
	for _, r := range roots {
		walk(neutral(r))
	}
	sort.Strings(messages)
	sort.Strings(enums)
	return messages, enums
}

func embeddedTypes(t *testing.T) types {
	t.Helper()
	b, err := os.ReadFile(embedded)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	return collect(set.File)
}

// mesosGoTypes reads the FileDescriptorProtos mesos-go v0.0.11's gogo-generated code
// registers (gzipped) for its copy of the Mesos v1 definitions.
func mesosGoTypes(t *testing.T) types {
	t.Helper()
	var files []*descriptorpb.FileDescriptorProto
	for _, name := range []string{"mesos.proto", "scheduler/scheduler.proto", "executor/executor.proto", "master/master.proto",
		"allocator/allocator.proto", "maintenance/maintenance.proto", "quota/quota.proto"} {
		gz := gogoproto.FileDescriptor(name)
		if gz == nil {
			t.Fatalf("mesos-go registers no %s", name)
		}
		r, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &fd); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		files = append(files, &fd)
	}
	return collect(files)
}

// mesos111Types compiles the Mesos 1.11.0 .proto files (internal/schema checks they are
// byte for byte the ones at that tag) afresh.
func mesos111Types(t *testing.T) types {
	t.Helper()
	fds, err := Compile(include, []string{"mesos/v1/scheduler/scheduler.proto", "mesos/v1/executor/executor.proto", "mesos/v1/master/master.proto"})
	if err != nil {
		t.Fatal(err)
	}
	var files []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	for _, f := range fds {
		files = append(files, protodesc.ToFileDescriptorProto(f))
		seen[f.Path()] = true
		for i := 0; i < f.Imports().Len(); i++ {
			if imp := f.Imports().Get(i); !seen[imp.Path()] {
				seen[imp.Path()] = true
				files = append(files, protodesc.ToFileDescriptorProto(imp.FileDescriptor))
			}
		}
	}
	return collect(files)
}

// compare lists, field by field, where got differs from ref for the messages and enums
// the roots reach in got, sorted: "changed:" a field with another name, label, type or
// message or enum type than ref's at its number (or an enum value's name); "missing:" one
// of ref's fields or values got lacks; "newer:" a message, enum, field or value ref lacks.
func compare(got, ref types) []string {
	var diff []string
	messages, enums := got.reach(roots)
	for _, m := range messages {
		rf, ok := ref.messages[m]
		if !ok {
			diff = append(diff, "newer: message "+m)
			continue
		}
		gf := got.messages[m]
		for num, want := range rf {
			if have, ok := gf[num]; !ok {
				diff = append(diff, fmt.Sprintf("missing: %s: %v", m, want))
			} else if have != want {
				diff = append(diff, fmt.Sprintf("changed: %s: %v, was %v", m, have, want))
			}
		}
		for num, have := range gf {
			if _, ok := rf[num]; !ok {
				diff = append(diff, fmt.Sprintf("newer: %s: %v", m, have))
			}
		}
	}
	for _, e := range enums {
		rv, ok := ref.enums[e]
		if !ok {
			diff = append(diff, "newer: enum "+e)
			continue
		}
		for num, want := range rv {
			if have, ok := got.enums[e][num]; !ok {
				diff = append(diff, fmt.Sprintf("missing: enum %s: %s = %d", e, want, num))
			} else if have != want {
				diff = append(diff, fmt.Sprintf("changed: enum %s: %s = %d, was %s", e, have, num, want))
			}
		}
		for num, have := range got.enums[e] {
			if _, ok := rv[num]; !ok {
				diff = append(diff, fmt.Sprintf("newer: enum %s: %s = %d", e, have, num))
			}
		}
	}
	sort.Strings(diff)
	return diff
}

// TestBuiltInTypesMatchMesos111FieldByField: every message and enum the built-in roots
// (the scheduler, executor and master events, the scheduler's calls) reach in the
// embedded mesos.pb has exactly the fields and values a fresh compilation of Mesos
// 1.11.0's .proto files gives: name, number, label, type and message or enum type; and
// the roots reach the same types in both.
func TestBuiltInTypesMatchMesos111FieldByField(t *testing.T) {
	got, ref := embeddedTypes(t), mesos111Types(t)
	for _, d := range compare(got, ref) {
		t.Errorf("the built-in types against Mesos 1.11: %s", d)
	}
	gm, ge := got.reach(roots)
	rm, re := ref.reach(roots)
	if strings.Join(gm, " ") != strings.Join(rm, " ") || strings.Join(ge, " ") != strings.Join(re, " ") {
		t.Errorf("the roots reach %d messages and %d enums in mesos.pb, %d and %d in Mesos 1.11", len(gm), len(ge), len(rm), len(re))
	}
	if len(gm) < 200 {
		t.Errorf("the roots reach only %d messages", len(gm))
	}
	t.Logf("compared %d messages and %d enums", len(gm), len(ge))
}

// TestBuiltInTypesMatchMesosGoFieldByField: every message and enum the built-in roots
// reach, held to the descriptors mesos-go v0.0.11 generated from its own copy of the
// Mesos v1 definitions (an implementation independent of the bridge's): each field
// mesos-go defines is there with its name, number, label, type and message or enum
// type. mesos-go predates Mesos 1.11: what differs must be exactly the list in
// testdata/newer-than-mesos-go.txt, what Mesos 1.11 added or changed after it
// (TestBuiltInTypesMatchMesos111FieldByField proves each is 1.11's), so a change shows
// in review. Nothing may be missing.
func TestBuiltInTypesMatchMesosGoFieldByField(t *testing.T) {
	got, ref := embeddedTypes(t), mesosGoTypes(t)
	diff := compare(got, ref)
	b, err := os.ReadFile(filepath.Join("testdata", "newer-than-mesos-go.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(b)); strings.Join(diff, "\n") != want {
		t.Errorf("the built-in types against mesos-go v0.0.11:\n%s\nwant (testdata/newer-than-mesos-go.txt):\n%s", strings.Join(diff, "\n"), want)
	}
	for _, d := range diff {
		if strings.HasPrefix(d, "missing:") {
			t.Errorf("the built-in types lack what mesos-go defines: %s", d)
		}
	}
	gm, ge := got.reach(roots)
	compared := 0
	for _, m := range gm {
		if _, ok := ref.messages[m]; ok {
			compared++
		}
	}
	t.Logf("compared %d of %d messages (and %d enums) with mesos-go", compared, len(gm), len(ge))
}

// TestEmbeddedSetIsWhatGenerateWrites: mesos.pb is this generator's output for the files
// in mesosproto, byte for byte, so no one edited either without regenerating.
func TestEmbeddedSetIsWhatGenerateWrites(t *testing.T) {
	want, err := Build(include, []string{"mesos/v1/scheduler/scheduler.proto", "mesos/v1/executor/executor.proto", "mesos/v1/master/master.proto"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(embedded)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("mesos.pb (%d bytes) is not what go generate ./internal/schema writes (%d bytes): regenerate it", len(got), len(want))
	}
}
