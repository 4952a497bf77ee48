package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func noEnv(string) string { return "" }

// Bad flags and arguments are usage errors (exit 2) that name the problem and the value,
// before anything is read or sent.
func TestPublishAndTailFlagErrorsNameTheValue(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cmd  string
		args []string
		want string
	}{
		{"publish", nil, "no ROUTE"},
		{"publish", []string{"-sequence", "5", "r"}, "-sequence 5 needs -stream-name"},
		{"publish", []string{"-format", "csv", "r"}, `-format "csv" is not json, recordio or raw`},
		{"publish", []string{"-url", "127.0.0.1:8080", "r"}, `-url "127.0.0.1:8080": want http://HOST:PORT`},
		{"publish", []string{"-url", "ftp://h:1", "r"}, `-url "ftp://h:1"`},
		{"publish", []string{"-url", "http://h:1/?x=1", "r"}, "without a query"},
		{"publish", []string{"-stream-name", "bad name!", "r"}, `stream name "bad name!"`},
		{"publish", []string{"-stream-name", "s", "-sequence", "9223372036854775808", "r"}, "above 2^63-1"},
		{"publish", []string{"-cert-file", "c.pem", "r"}, "-cert-file and -key-file go together"},
		{"publish", []string{"-ca-file", ca, "r"}, "-ca-file " + ca + ": no PEM certificate"},
		{"publish", []string{"-token-file", empty, "r"}, "-token-file " + empty + " is empty"},
		{"publish", []string{"-token-file", filepath.Join(dir, "none"), "r"}, "no such file"},
		{"publish", []string{"-H", "NoColon", "r"}, `"NoColon" is not 'Name: value'`},
		{"publish", []string{"-bogus", "r"}, "flag provided but not defined: -bogus"},
		{"tail", nil, "want one STREAM, got 0"},
		{"tail", []string{"a", "b"}, "want one STREAM, got 2"},
		{"tail", []string{"-n", "-1", "s"}, "-n -1 is negative"},
		{"tail", []string{"-ack", "maybe", "s"}, `-ack "maybe" is not client or auto`},
		{"tail", []string{"-position", "middle", "s"}, `-position "middle" is not earliest or latest`},
		{"tail", []string{"-o", "yaml", "s"}, `-o "yaml" is not json, recordio or envelope`},
		{"tail", []string{"-url", "http://", "s"}, `-url "http://"`},
		{"tail", []string{"", "-n", "1"}, "the stream name is empty"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		var code int
		if c.cmd == "publish" {
			code = cmdPublish(c.args, strings.NewReader(""), &out, &errb, noEnv, nil)
		} else {
			code = cmdTail(c.args, &out, &errb, noEnv, nil)
		}
		if code != exitUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s %q: exit %d, stderr %q; want exit 2 naming %q", c.cmd, c.args, code, errb.String(), c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%s %q: stdout %q, want nothing", c.cmd, c.args, out.String())
		}
	}
}

// Flags may follow the positional arguments, as in "bridge tail tasks -n 1"; after
// "--" everything is positional.
func TestFlagsMayFollowTheArguments(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	n := fs.Int("n", 0, "")
	o := fs.String("o", "", "")
	pos, err := parseInterspersed(fs, []string{"-o", "x", "tasks", "-n", "3", "a", "-", "--", "-n", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if *n != 3 || *o != "x" || strings.Join(pos, ",") != "tasks,a,-,-n,b" {
		t.Fatalf("n %d, o %q, positional %q", *n, *o, pos)
	}
}

// The endpoint is the bridge's default path for the name, or the name when it is a path.
func TestEndpointOfARouteOrAPath(t *testing.T) {
	c := connFlags{url: "https://bridge.example:8443/"}
	for name, want := range map[string]string{
		"events":         "https://bridge.example:8443/v1/publish/events",
		"a b":            "https://bridge.example:8443/v1/publish/a%20b",
		"/mesos/publish": "https://bridge.example:8443/mesos/publish",
	} {
		if got, err := c.endpoint("publish", name); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", name, got, err, want)
		}
	}
}

// -token-file is read again before every request, so a renewed token is used at once;
// without it $BRIDGE_TOKEN is the token.
func TestTokenFileIsReadBeforeEachRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := connFlags{tokenFile: path}
	src, err := c.token(noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("renewed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := src.Token(t.Context()); tok != "renewed" || err != nil {
		t.Fatalf("token %q, %v; want the renewed one", tok, err)
	}
	env := func(k string) string {
		if k == tokenEnv {
			return " from-env "
		}
		return ""
	}
	src, err = (&connFlags{}).token(env)
	if err != nil || src == nil {
		t.Fatalf("%v, %v", src, err)
	}
	if tok, _ := src.Token(t.Context()); tok != "from-env" {
		t.Fatalf("token %q", tok)
	}
}

// Only a terminal gets a progress line: a file, a pipe and /dev/null (a character device,
// which a mode check alone would take for a terminal) do not.
func TestProgressOnlyOnATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "err"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, file := range map[string]*os.File{"a file": f, os.DevNull: null, "a pipe": w} {
		if isTerminal(file) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
	var buf bytes.Buffer
	p := newProgress(&buf)
	p.Show(func() string { return "1 read" })
	p.Clear()
	if buf.Len() != 0 {
		t.Fatalf("progress wrote %q where no terminal is", buf.String())
	}
}

// $BRIDGE_URL replaces the default -url; -url still wins.
func TestBridgeURLFromTheEnvironment(t *testing.T) {
	env := func(k string) string {
		if k == urlEnv {
			return "https://bridge.example:8443"
		}
		return ""
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "https://bridge.example:8443/v1/streams/s"},
		{[]string{"-url", "http://other:1"}, "http://other:1/v1/streams/s"},
	} {
		var conn connFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		conn.register(fs, env)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got, err := conn.endpoint("streams", "s"); err != nil || got != c.want {
			t.Errorf("%q: %q, %v; want %q", c.args, got, err, c.want)
		}
	}
	var conn connFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	conn.register(fs, noEnv)
	if conn.url != defaultURL {
		t.Fatalf("without the variable -url is %q", conn.url)
	}
}

// -h prints the command's usage and its flags on stderr and exits 0, for both commands
// that talk to the bridge.
func TestPublishAndTailHelpExitsZeroWithUsage(t *testing.T) {
	for _, cmd := range []string{"publish", "tail"} {
		var out, errb bytes.Buffer
		var code int
		if cmd == "publish" {
			code = cmdPublish([]string{"-h"}, strings.NewReader(""), &out, &errb, noEnv, nil)
		} else {
			code = cmdTail([]string{"-h"}, &out, &errb, noEnv, nil)
		}
		if code != exitOK || !strings.Contains(errb.String(), "usage: bridge "+cmd+" [flags]") || !strings.Contains(errb.String(), "-token-file") {
			t.Errorf("%s -h: exit %d, stderr %q; want exit 0 with the usage and the connection flags", cmd, code, errb.String())
		}
		if out.Len() != 0 {
			t.Errorf("%s -h: stdout %q, want nothing", cmd, out.String())
		}
	}
}
