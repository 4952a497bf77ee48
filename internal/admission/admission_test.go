package admission

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGateLimitsDrainsAndWaits(t *testing.T) {
	var g Gate
	a, err := g.Enter(2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.Enter(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Enter(2); !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("a third stream over a limit of 2: %v", err)
	}
	b()
	b() // leaving twice counts once
	if g.Active() != 1 {
		t.Fatalf("active %d", g.Active())
	}
	if !g.Drain() || g.Drain() || !g.Draining() {
		t.Fatal("Drain reports the first call only")
	}
	if _, err := g.Enter(2); !errors.Is(err, ErrDraining) {
		t.Fatalf("a stream while draining: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a stream open and its context ended: %v", err)
	}
	waited := make(chan error, 2)
	go func() { waited <- g.Wait(context.Background()) }()
	go func() { waited <- g.Wait(context.Background()) }()
	a()
	for range 2 {
		if err := <-waited; err != nil || g.Active() != 0 {
			t.Fatalf("Wait after the last stream left: %v (active %d)", err, g.Active())
		}
	}
	if err := g.Wait(ctx); err != nil {
		t.Fatalf("Wait with nothing open: %v", err)
	}
}

func TestAuthenticateBeforeAuthorize(t *testing.T) {
	cfg, err := config.Parse([]byte(`
auth:
  tokens:
    - {name: w, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, routes: [r]}
routes:
  - name: r
    default: {topic: t}
`))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Compile(cfg.Auth)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	if _, err := Authenticate(tab, h); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("no token: %v", err)
	}
	h.Set("Authorization", "Bearer test") // sha256("test") is the token above
	c, err := Authenticate(tab, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Authorize(Write, "r"); err != nil {
		t.Fatal(err)
	}
	if err := c.Authorize(Read, "r"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a write token reading: %v", err)
	}
}
