package conn

import (
	"context"
	"errors"
	"net/url"
	"sort"
	"sync"
	"time"
)

// Pool keeps one connection per broker, shared by every producer and consumer on it.
type Pool struct {
	base Options

	mu     sync.Mutex
	conns  map[string]*entry
	closed bool
	// refused holds, by address, the handshakes refused since the last accepted one.
	refused map[string]*Refusal
}

// Refusal is a broker's refusal of CONNECT (ErrHandshake: AuthenticationError, an
// unsupported version, a port that is not Pulsar's) not followed by an accepted
// handshake at the same address.
type Refusal struct {
	Addr        string    // the address dialled
	Since, Last time.Time // the first and the latest refusal
	Count       int       // refusals since the last accepted handshake
	Err         error     // the latest refusal
}

// refusalMemory is how long a refusal is reported without a newer one: longer than any
// reconnect backoff, so a broker that goes on refusing stays reported, and one nobody
// dials any more drops out.
const refusalMemory = 2 * time.Minute

type entry struct {
	ready chan struct{} // closed when the dial finished
	conn  *Conn
	err   error
}

// NewPool returns a pool whose connections use base (Addr and ProxyToBrokerURL are set per connection).
func NewPool(base Options) *Pool {
	return &Pool{base: base, conns: map[string]*entry{}, refused: map[string]*Refusal{}}
}

// Get returns the open connection for logicalURL reached at physicalAddr, dialing it
// once when there is none; concurrent callers share one dial.
func (p *Pool) Get(ctx context.Context, logicalURL, physicalAddr string, proxied bool) (*Conn, error) {
	key := logicalURL + "|" + physicalAddr
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		e, ok := p.conns[key]
		if !ok {
			e = &entry{ready: make(chan struct{})}
			p.conns[key] = e
			p.mu.Unlock()
			opts := p.base
			opts.Addr = physicalAddr
			if proxied {
				opts.ProxyToBrokerURL = proxyTarget(logicalURL)
			}
			e.conn, e.err = Dial(ctx, opts)
			close(e.ready)
			p.noteHandshake(physicalAddr, e.err)
			if e.err != nil {
				p.drop(key, e)
				return nil, e.err
			}
			return e.conn, nil
		}
		p.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err == nil && e.conn.Err() == nil {
			return e.conn, nil
		}
		p.drop(key, e) // a dead connection: dial again
	}
}

// noteHandshake records how a handshake with addr ended: a refusal is kept until one
// is accepted.
func (p *Pool) noteHandshake(addr string, err error) {
	p.mu.Lock()
	var began, ended *Refusal
	switch {
	case err == nil:
		ended = p.refused[addr]
		delete(p.refused, addr)
	case errors.Is(err, ErrHandshake):
		now := time.Now()
		r := p.refused[addr]
		if r == nil || now.Sub(r.Last) > refusalMemory {
			r = &Refusal{Addr: addr, Since: now}
			p.refused[addr] = r
			began = r
		}
		r.Last, r.Err = now, err
		r.Count++
	}
	p.mu.Unlock()
	// The log says when a spell of refusals begins and ends, whichever path met it (a
	// reconnection, or a creation retrying it within its deadline), not each refusal.
	if log := p.base.Logger; log != nil {
		switch {
		case began != nil:
			log.Warn("the broker refuses the client's handshake; retried with backoff", "broker", addr, "error", err.Error())
		case ended != nil:
			log.Info("the broker accepts the client's handshake again", "broker", addr,
				"refusals", ended.Count, "for", time.Since(ended.Since).Round(time.Millisecond).String())
		}
	}
}

// Refusals returns the handshakes refused since the last accepted one, by address,
// each refused again within the last two minutes.
func (p *Pool) Refusals() []Refusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Refusal
	for addr, r := range p.refused {
		if time.Since(r.Last) > refusalMemory {
			delete(p.refused, addr)
			continue
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

func (p *Pool) drop(key string, e *entry) {
	p.mu.Lock()
	if p.conns[key] == e {
		delete(p.conns, key)
	}
	p.mu.Unlock()
}

// Close closes every connection and refuses new ones.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	entries := p.conns
	p.conns = map[string]*entry{}
	p.mu.Unlock()
	for _, e := range entries {
		<-e.ready
		if e.conn != nil {
			e.conn.Close()
		}
	}
}

// proxyTarget is what CONNECT's proxy_to_broker_url carries: the logical broker's host:port,
// as the official clients send it. A Pulsar proxy resolves that value as a host name, so
// the URL's scheme must not be in it ("Failed to resolve 'pulsar://10.0.0.7'").
func proxyTarget(logicalURL string) string {
	if u, err := url.Parse(logicalURL); err == nil && u.Host != "" {
		return u.Host
	}
	return logicalURL
}
