// Package tcptest runs a test's throwaway TCP peers (stub brokers, black holes,
// proxies): each accepted connection is handed to a handler on a goroutine of its own,
// and when the test ends the listener, every connection and every goroutine are closed
// and waited for, so goleak sees none of them.
package tcptest

import (
	"net"
	"sync"
	"testing"
)

// Server is a loopback listener whose connections are served by a handler.
type Server struct {
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool // Close began: a connection tracked now is closed at once
	once   sync.Once
}

// Serve listens on a loopback port and calls handle for each connection it accepts,
// each on its own goroutine; the connection is closed with the server (handle may close
// it sooner). The server is closed when the test ends, or by Close.
func Serve(t testing.TB, handle func(s *Server, c net.Conn)) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.Track(c)
			s.Go(func() { handle(s, c) })
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Conns are the connections accepted (and tracked) so far, oldest first.
func (s *Server) Conns() []net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]net.Conn(nil), s.conns...)
}

// Track closes c with the server: a connection a handler opened (a proxy's to its
// target). After Close began, c is closed at once.
func (s *Server) Track(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return
	}
	s.conns = append(s.conns, c)
}

// Go runs f on a goroutine the server waits for when it closes: f must return once
// the server's connections are closed.
func (s *Server) Go(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Close closes the listener and every tracked connection, and waits for the
// handlers' goroutines. It may be called more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		s.ln.Close()
		s.mu.Lock()
		s.closed = true
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
}
