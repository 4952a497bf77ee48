package conn

import (
	"context"
	"net/url"
	"sync"
)

// Pool keeps one connection per broker, shared by every producer and consumer on it.
type Pool struct {
	base Options

	mu     sync.Mutex
	conns  map[string]*entry
	closed bool
}

type entry struct {
	ready chan struct{} // closed when the dial finished
	conn  *Conn
	err   error
}

// NewPool returns a pool whose connections use base (Addr and ProxyToBrokerURL are set per connection).
func NewPool(base Options) *Pool {
	return &Pool{base: base, conns: map[string]*entry{}}
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
