package client_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The package is for schedulers to import without the bridge's dependencies: it may use
// the standard library and recordio only.
func TestPackageImportsOnlyRecordioAndTheStandardLibrary(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the package's dependencies")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	want := []string{"github.com/recordio-bridge/bridge/client", "github.com/recordio-bridge/bridge/recordio"}
	if !slices.Equal(got, want) {
		t.Errorf("non-standard dependencies %v, want only %v", got, want)
	}
}
