// Package admission decides whether a request may open a stream, for ingress and egress
// alike: the bearer token (authenticated before anything is looked up, then authorized
// for what the request names), the limit on concurrent streams, and the drain that
// refuses new streams and waits for the open ones. It chooses no HTTP status: its errors
// are values that ingress and egress answer each in their own way.
package admission

import (
	"context"
	"errors"
	"net/http"
	"sync"
)

// Errors of Gate.Enter. (Authentication errors are ErrUnauthenticated and ErrForbidden.)
var (
	// ErrTooManyStreams: the server's limit of concurrent streams is reached.
	ErrTooManyStreams = errors.New("too many concurrent streams")
	// ErrDraining: the server is shutting down and opens no stream.
	ErrDraining = errors.New("the bridge is shutting down")
)

// Authenticate finds who the request's bearer token is, once per request, before the
// request's path is looked up, so an unauthenticated caller learns nothing of what
// exists; the Caller then authorizes what the request names. Its error wraps
// ErrUnauthenticated or ErrIdentityProviderUnavailable.
func Authenticate(t *Tokens, h http.Header) (*Caller, error) {
	return t.Identify(BearerToken(h))
}

// Gate counts a server's open streams, refuses new ones beyond a limit or once draining,
// and lets Wait see them all end. The zero value is an open gate.
type Gate struct {
	mu       sync.Mutex
	active   int
	draining bool
	idle     chan struct{} // closed when active drops to 0; made by the first waiter
}

// Enter admits one stream when fewer than max are open and the gate is not draining; the
// stream calls leave (once) when it ends. It fails with ErrDraining or ErrTooManyStreams.
func (g *Gate) Enter(max int) (leave func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.draining:
		return nil, ErrDraining
	case g.active >= max:
		return nil, ErrTooManyStreams
	}
	g.active++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.active--
			if g.active == 0 && g.idle != nil {
				close(g.idle)
				g.idle = nil
			}
		})
	}, nil
}

// Drain refuses every stream from now on; it reports whether this call started the drain.
func (g *Gate) Drain() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	first := !g.draining
	g.draining = true
	return first
}

// Draining reports whether Drain was called.
func (g *Gate) Draining() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.draining
}

// Active reports how many streams are open.
func (g *Gate) Active() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.active
}

// Wait returns when no admitted stream is open, or with ctx's error when ctx ends first.
// It starts no goroutine: the last stream to leave wakes every waiter.
func (g *Gate) Wait(ctx context.Context) error {
	g.mu.Lock()
	if g.active == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
