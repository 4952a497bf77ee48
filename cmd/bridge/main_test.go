package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionPrintsVersionAndGoRuntime(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errb.String())
	}
	got := out.String()
	if !strings.HasPrefix(got, "bridge "+version+" ") || !strings.Contains(got, "go1.") {
		t.Fatalf("version output %q lacks the version %q or the Go runtime", got, version)
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("stderr %q does not name the unknown command", errb.String())
	}
}
