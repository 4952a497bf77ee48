package config

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// Every decoding problem names its key by its full path and line and the value's kind in
// the configuration's words, never a Go type, and decoding goes on past it.
func TestDecodingProblemsNameTheFullKeyPathAndNoGoType(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"listen:\n  opz: 1\n", "line 2: listen.opz: unknown key; the keys under listen are data, ops, pprof, tls"},
		{"lisen: {}\n", "line 1: lisen: unknown key; the keys here are listen, pulsar"},
		{"listen: 5\n", `line 1: listen: want a mapping (keys data, ops, pprof, tls), not "5"`},
		{"listen:\n  pprof: sometimes\n", `line 2: listen.pprof: "sometimes" is not true or false`},
		{"listen:\n  data: [a]\n", "line 2: listen.data: want a string, not a list"},
		{"ingress:\n  maxStreams: 1.5\n", `line 2: ingress.maxStreams: "1.5" is not a whole number`},
		{"routes:\n  name: r\n", "line 2: routes: want a list, not a mapping"},
		{"routes:\n  - name: r\n    rules:\n      - topic: t\n        tpoic: u\n    default: {topic: t}\n",
			"line 5: routes[0].rules[0].tpoic: unknown key; the keys under routes[0].rules[0] are match, topic, key, properties"},
		{"routes:\n  - name: r\n    properties: [a]\n    default: {topic: t}\n", "line 3: routes[0].properties: want a mapping, not a list"},
		{"streams:\n  - name: s\n    topics: [t]\n    retry:\n      jitter: lots\n", `line 5: streams[0].retry.jitter: "lots" is not a number`},
		{"listen:\n  data: 127.0.0.1:1\n  data: 127.0.0.1:2\n", "line 3: listen.data: written twice (first on line 2)"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %q", c.yaml, err, c.want)
			continue
		}
		for _, goWord := range []string{"config.", "int64", "float64", "struct", "!!", "yaml:", "unmarshal"} {
			if strings.Contains(err.Error(), goWord) {
				t.Errorf("%q: %v names Go's or the decoder's %q", c.yaml, err, goWord)
			}
		}
	}
}

// A value that cannot be decoded is reported once: the checks that would see the key
// missing, or still at its default, do not report it again; the other checks still run.
func TestAKeyThatDoesNotDecodeIsReportedOnceAndTheRestIsStillChecked(t *testing.T) {
	_, err := Parse([]byte("routes:\n  - name: [r]\n    default: {topic: t}\n  - name: s\ningress:\n  maxStreams: 0\n"))
	var p Problems
	if !errors.As(err, &p) {
		t.Fatalf("%v", err)
	}
	want := []Problem{
		{Path: "routes[0].name", Line: 2, Message: "want a string, not a list"},
		{Path: "routes[1].default", Line: 4, Message: "missing; a route needs a default target for records no rule matches"},
		{Path: "ingress.maxStreams", Line: 6, Message: "0 must be greater than zero"},
	}
	if len(p) != len(want) {
		t.Fatalf("got\n%v\nwant\n%v", p, Problems(want))
	}
	for i := range want {
		if p[i] != want[i] {
			t.Errorf("problem %d: %+v, want %+v", i, p[i], want[i])
		}
	}
}

// A listen address is checked as net.Listen reads it, without binding it.
func TestListenAddressesAreParsedAndTheirPortsChecked(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:99999":  `listen.data: "127.0.0.1:99999": port 99999 is out of range (0 to 65535)`,
		"127.0.0.1:-1":     `port "-1" is neither a number from 0 to 65535 nor a service name`,
		"127.0.0.1:":       `port "" is neither`,
		"8080":             `"8080" is not host:port`,
		"bad host!:80":     `host "bad host!" is neither an IP address nor a host name`,
		"[::1]:65536":      "port 65536 is out of range",
		"localhost:65535":  "",
		"[fe80::1%lo]:80":  "",
		":0":               "",
		"0.0.0.0:8080":     "",
		"bridge.local.:80": "",
	} {
		_, err := Parse([]byte("listen:\n  data: \"" + addr + "\"\n"))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", addr, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", addr, err, want)
		case want != "" && !strings.HasPrefix(err.Error(), "line 2: listen.data: "):
			t.Errorf("%s: %v does not name line 2 and listen.data", addr, err)
		}
	}
}

// Keys merged from an anchor (<<: *defaults) are decoded unless the mapping writes them
// itself, as YAML says; they are not "written twice".
func TestMergedKeysAreOverriddenByTheMappingsOwn(t *testing.T) {
	cfg, err := Parse([]byte("egress:\n  <<: {maxStreams: 5, writeTimeout: 5s}\n  maxStreams: 6\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Egress.MaxStreams != 6 || cfg.Egress.WriteTimeout.D().Seconds() != 5 {
		t.Fatalf("egress %+v: want maxStreams 6 (its own) and writeTimeout 5s (merged)", cfg.Egress)
	}
}

// A small document whose aliases name aliases (routes of rules of properties, each an
// alias) would decode into millions of values; the decoder stops, as the YAML decoder
// does for its own alias expansion, and says why, instead of spending minutes and
// gigabytes.
func TestAliasesExpandingADocumentTooFarAreRefused(t *testing.T) {
	const n = 100
	var b strings.Builder
	b.WriteString("x: &p {")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("k" + strconv.Itoa(i) + ": v")
	}
	b.WriteString("}\ny: &ru {topic: t, properties: *p}\nz: &r {name: r, path: /a, rules: [")
	b.WriteString(strings.TrimSuffix(strings.Repeat("*ru, ", n), ", "))
	b.WriteString("]}\nroutes: [")
	b.WriteString(strings.TrimSuffix(strings.Repeat("*r, ", n), ", "))
	b.WriteString("]\n")
	var cfg Config
	_, probs := decodeFile([]byte(b.String()), &cfg)
	found := false
	for _, p := range probs {
		found = found || strings.Contains(p.Message, "aliases expand it too far")
	}
	if !found {
		t.Fatalf("problems %v: want the alias expansion refused", probs)
	}
}
