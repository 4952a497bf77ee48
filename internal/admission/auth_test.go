package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/config"
)

// compile compiles doc's auth section.
func compile(t *testing.T, doc string) *Tokens {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Compile(cfg.Auth)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAuthorizeByTokenHashAndGrant(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/tok", []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte("writer-token"))
	tab := compile(t, fmt.Sprintf(`
auth:
  tokens:
    - {name: writer, sha256: %s, routes: [r]}
    - {name: reader, file: %s/tok, streams: ["*"]}
routes:
  - name: r
    default: {topic: t}
streams:
  - name: s
    topics: [t]
`, hex.EncodeToString(h[:]), dir))
	cases := []struct {
		token  string
		access Access
		name   string
		want   error
	}{
		{"writer-token", Write, "r", nil},
		{"writer-token", Read, "s", ErrForbidden},
		{"file-token", Read, "s", nil},
		{"file-token", Write, "r", ErrForbidden},
		{"", Write, "r", ErrUnauthenticated},
		{"nope", Write, "r", ErrUnauthenticated},
	}
	for _, c := range cases {
		_, err := tab.Authorize(c.token, c.access, c.name)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%q %v %s: %v, want %v", c.token, c.access, c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), c.token) && c.token != "" {
			t.Errorf("the error shows the token: %v", err)
		}
	}
	if open := compile(t, "routes: []\n"); open.AuthRequired() || (*Tokens)(nil).AuthRequired() {
		t.Fatal("no tokens configured, yet auth is required")
	}
}

// TestARotatedTokenFileIsReadAgain: the Secret behind a file token is rotated; the new
// token is accepted and the old one refused, without a reload. A file that cannot be read
// for a moment keeps the token read last.
func TestARotatedTokenFileIsReadAgain(t *testing.T) {
	defer func(d time.Duration) { tokenRecheck = d }(tokenRecheck)
	tokenRecheck = 0 // read on every request
	dir := t.TempDir()
	path := dir + "/tok"
	if err := os.WriteFile(path, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tab := compile(t, fmt.Sprintf("auth:\n  tokens:\n    - {name: reader, file: %s, streams: [\"*\"]}\nstreams:\n  - name: s\n    topics: [t]\n", path))
	if _, err := tab.Authorize("old-token", Read, "s"); err != nil {
		t.Fatal(err)
	}
	// Rotated the way a Secret volume does it: a new file renamed over the old.
	if err := os.WriteFile(path+".new", []byte("new-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Authorize("new-token", Read, "s"); err != nil {
		t.Fatalf("the rotated token: %v", err)
	}
	if _, err := tab.Authorize("old-token", Read, "s"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("the old token after the rotation: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Authorize("new-token", Read, "s"); err != nil {
		t.Fatalf("with the file missing for a moment: %v", err)
	}
}
