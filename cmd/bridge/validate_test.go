package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// tenMistakes are the problems of testdata/ten-mistakes.yaml, one of each kind: every
// one is reported in a single run, with its key's full path and its line.
var tenMistakes = []struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Says string `json:"-"` // part of the message
}{
	{"listen.data", 2, "port 99999 is out of range (0 to 65535)"},                                   // bad port
	{"listen.opz", 3, "unknown key; the keys under listen are data, ops, pprof, tls"},               // unknown key
	{"pulsar.keepAlive", 5, `"soon" is not a duration`},                                             // bad duration
	{"pulsar.compression", 6, `"brotli" is not one of none, lz4, zlib, zstd, snappy`},               // bad choice
	{"ingress.maxStreams", 8, `"many" is not a whole number`},                                       // wrong type
	{"ingress.maxRecordBytes", 9, `"4MB" is not a size`},                                            // bad size
	{"routes[0].rules[0].topic", 13, `"mesos-{json:type" has a { without its }`},                    // bad template
	{"routes[1].name", 16, `"mesos" is also the name of routes[0]`},                                 // duplicate route name
	{"routes[2].rules[0].topic", 22, "missing"},                                                     // missing topic
	{"streams[0].type", 28, `"exclusive-ish" is not one of [exclusive shared failover key_shared]`}, // bad stream type
}

func TestValidateReportsTenDifferentMistakesInOneRunAsTextAndJSON(t *testing.T) {
	const file = "testdata/ten-mistakes.yaml"
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "-config", file}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if len(lines) != len(tenMistakes)+1 {
		t.Fatalf("%d lines, want %d problems and a count:\n%s", len(lines), len(tenMistakes), errb.String())
	}
	for i, m := range tenMistakes {
		if want := fmt.Sprintf("%s:%d: %s: ", file, m.Line, m.Path); !strings.HasPrefix(lines[i], want) || !strings.Contains(lines[i], m.Says) {
			t.Errorf("line %d: %q, want %q...%q", i+1, lines[i], want, m.Says)
		}
	}
	if want := fmt.Sprintf("bridge validate: %s: 10 problem(s)", file); lines[len(lines)-1] != want {
		t.Errorf("last line %q, want %q", lines[len(lines)-1], want)
	}

	out.Reset()
	errb.Reset()
	if code := run([]string{"validate", "-config", file, "-o", "json"}, &out, &errb); code != 1 || errb.Len() != 0 {
		t.Fatalf("-o json: exit %d, stderr %q", code, errb.String())
	}
	var got []struct {
		Path    string `json:"path"`
		Line    int    `json:"line"`
		Message string `json:"message"`
	}
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(tenMistakes) {
		t.Fatalf("%d problems in JSON, want %d: %+v", len(got), len(tenMistakes), got)
	}
	for i, m := range tenMistakes {
		if got[i].Path != m.Path || got[i].Line != m.Line || !strings.Contains(got[i].Message, m.Says) || strings.HasPrefix(got[i].Message, m.Path) {
			t.Errorf("problem %d: %+v, want %s at line %d saying %q", i, got[i], m.Path, m.Line, m.Says)
		}
	}
}

func TestValidateJSONOfAValidFileIsAnEmptyArray(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "-config", "../../config/example.yaml", "-o", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	var got []any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("stdout %q (%v), want []", out.String(), err)
	}
	if code := run([]string{"validate", "-config", "../../config/example.yaml", "-o", "yaml"}, &out, &errb); code != 2 {
		t.Fatalf("-o yaml: exit %d, want a usage error", code)
	}
}

// A file that cannot be read is one problem of no key, in JSON too.
func TestValidateJSONOfAMissingFileIsOneProblem(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "-config", "testdata/no-such.yaml", "-o", "json"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d", code)
	}
	var got []map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 1 || !reflect.DeepEqual(got[0]["path"], "") ||
		!strings.Contains(got[0]["message"].(string), "no-such.yaml") {
		t.Fatalf("stdout %q (%v)", out.String(), err)
	}
}
