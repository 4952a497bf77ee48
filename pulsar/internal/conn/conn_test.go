package conn

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/internal/tcptest"
	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stub is a minimal peer: it answers CONNECT, then hands every frame it reads to onFrame.
type stub struct {
	srv     *tcptest.Server
	onFrame func(c net.Conn, cmd *pb.BaseCommand)
}

func newStub(t *testing.T, onFrame func(net.Conn, *pb.BaseCommand)) *stub {
	s := &stub{onFrame: onFrame}
	s.srv = tcptest.Serve(t, func(_ *tcptest.Server, c net.Conn) { s.serve(c) })
	return s
}

func write(c net.Conn, cmd *pb.BaseCommand) {
	b, _ := frame.AppendCommand(nil, cmd)
	_, _ = c.Write(b)
}

func (s *stub) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		var f frame.Frame
		if err := readFrame(br, &f, 1<<20); err != nil {
			return
		}
		if f.Cmd.GetType() == pb.BaseCommand_CONNECT {
			write(c, &pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
				ServerVersion: proto.String("stub"), ProtocolVersion: proto.Int32(20), MaxMessageSize: proto.Int32(1 << 20)}})
			continue
		}
		if s.onFrame != nil {
			s.onFrame(c, f.Cmd)
		}
	}
}

func lookup(id uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String("t"), RequestId: proto.Uint64(id)}}
}

func TestHandshakeReadsBrokerLimits(t *testing.T) {
	s := newStub(t, nil)
	c, err := Dial(context.Background(), Options{Addr: s.srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.MaxMessageSize() != 1<<20 || c.ServerVersion() != "stub" {
		t.Fatalf("max %d, version %q", c.MaxMessageSize(), c.ServerVersion())
	}
}

func TestCloseFailsEveryWaiterWithOneError(t *testing.T) {
	s := newStub(t, nil) // never answers requests
	c, err := Dial(context.Background(), Options{Addr: s.srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := c.Request(context.Background(), uint64(i+1), lookup(uint64(i+1)))
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	c.Close()
	c.Close() // idempotent
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("waiter got %v, want ErrClosed", err)
		}
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Fatalf("Err() = %v", c.Err())
	}
	if err := c.Send(lookup(9)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after close: %v", err)
	}
}

func TestRequestGivesUpOnItsContextAndServesTheAnswerToOthers(t *testing.T) {
	answer := make(chan struct{})
	s := newStub(t, func(nc net.Conn, cmd *pb.BaseCommand) {
		if id := cmd.GetLookupTopic().GetRequestId(); id == 2 {
			<-answer
			for _, rid := range []uint64{1, 2} { // 1 is late: its waiter left
				write(nc, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
					RequestId: proto.Uint64(rid), Response: pb.CommandLookupTopicResponse_Connect.Enum()}})
			}
		}
	})
	c, err := Dial(context.Background(), Options{Addr: s.srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Request(ctx, 1, lookup(1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Request(context.Background(), 2, lookup(2))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	close(answer)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the reader blocked on an answer nobody waited for")
	}
}

func TestKeepAliveDeclaresASilentPeerDead(t *testing.T) {
	pings := make(chan struct{}, 10)
	s := newStub(t, func(_ net.Conn, cmd *pb.BaseCommand) {
		if cmd.GetType() == pb.BaseCommand_PING {
			pings <- struct{}{} // noted, never answered
		}
	})
	c, err := Dial(context.Background(), Options{Addr: s.srv.Addr(), KeepAlive: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a silent broker was never declared dead")
	}
	if !errors.Is(c.Err(), ErrKeepAliveTimeout) {
		t.Fatalf("Err() = %v", c.Err())
	}
	select { // the stub may read the ping after the client gave up
	case <-pings:
	case <-time.After(5 * time.Second):
		t.Fatal("declared dead without a ping")
	}
}

func TestAnswersPingWithPong(t *testing.T) {
	pong := make(chan struct{}, 1)
	s := newStub(t, func(nc net.Conn, cmd *pb.BaseCommand) {
		if cmd.GetType() == pb.BaseCommand_PONG {
			pong <- struct{}{}
		}
	})
	c, err := Dial(context.Background(), Options{Addr: s.srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := s.srv.Conns()[0]
	write(peer, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	select {
	case <-pong:
	case <-time.After(5 * time.Second):
		t.Fatal("no PONG")
	}
}

func TestHandshakeRefusedWithServerError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		var f frame.Frame
		_ = readFrame(bufio.NewReader(nc), &f, 1<<20)
		write(nc, &pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
			Error: pb.ServerError_AuthenticationError.Enum(), Message: proto.String("who are you")}})
		_, _ = io.Copy(io.Discard, nc)
	}()
	_, err = Dial(context.Background(), Options{Addr: ln.Addr().String()})
	var se *ServerError
	if !errors.Is(err, ErrHandshake) || !errors.As(err, &se) || se.Message != "who are you" {
		t.Fatalf("err = %v", err)
	}
}

// frozenStub is a peer that reads the first frame after CONNECTED and then nothing
// more (a frozen JVM): the client's socket buffers fill and its writes block.
func frozenStub(t *testing.T) *stub {
	release := make(chan struct{})
	s := newStub(t, func(net.Conn, *pb.BaseCommand) { <-release })
	t.Cleanup(func() { close(release) }) // runs before the stub's own cleanup
	return s
}

// fillWith queues far more than loopback socket buffers hold, without copying.
func fillWith(t *testing.T, c *Conn) {
	big := make([]byte, 1<<20)
	for range 128 {
		if err := c.SendFrame(big); err != nil {
			return // already closed
		}
	}
}

func TestWriteDeadlineClosesAConnectionWhosePeerStoppedReading(t *testing.T) {
	s := frozenStub(t)
	c, err := Dial(context.Background(), Options{Addr: s.srv.Addr(), KeepAlive: time.Hour, WriteTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(lookup(1)); err != nil { // the stub reads this one, then freezes
		t.Fatal(err)
	}
	fillWith(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Request(ctx, 2, lookup(2))
	if !errors.Is(err, ErrWriteTimeout) || !errors.Is(err, ErrClosed) {
		t.Fatalf("a request on a connection whose writer is stuck: %v, want ErrWriteTimeout and ErrClosed", err)
	}
	if !errors.Is(c.Err(), ErrWriteTimeout) {
		t.Fatalf("Err() = %v", c.Err())
	}
}

// TestKeepAliveIsNotBlindedByABlockedWriter: liveness lives in its own goroutine, so a
// writer stuck on a frozen peer does not stop it from closing the connection.
func TestKeepAliveIsNotBlindedByABlockedWriter(t *testing.T) {
	s := frozenStub(t)
	c, err := Dial(context.Background(), Options{Addr: s.srv.Addr(), KeepAlive: 50 * time.Millisecond, WriteTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(lookup(1)); err != nil {
		t.Fatal(err)
	}
	fillWith(t, c)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a frozen peer was not detected while the writer was blocked")
	}
	if !errors.Is(c.Err(), ErrKeepAliveTimeout) {
		t.Fatalf("Err() = %v, want ErrKeepAliveTimeout", c.Err())
	}
}

// TestKeepAliveDeclaresDeadABrokerThatReadsButNeverAnswers: writes that complete keep
// a PING queued behind them from counting against the broker, but not for ever: once
// far more than the socket buffers hold was written after the PING, the broker has read
// it, and its silence counts from then although it goes on reading.
func TestKeepAliveDeclaresDeadABrokerThatReadsButNeverAnswers(t *testing.T) {
	s := newStub(t, nil) // reads every frame, answers none
	c, err := Dial(context.Background(), Options{Addr: s.srv.Addr(), KeepAlive: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big, err := frame.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(strings.Repeat("t", 256<<10)), RequestId: proto.Uint64(1)}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(time.Minute)
	for {
		if err := c.SendFrame(big); err != nil {
			break
		}
		select {
		case <-c.Done():
		case <-deadline:
			t.Fatal("a broker that reads everything and never answers a PING was never declared dead")
		case <-time.After(time.Millisecond):
			continue
		}
		break
	}
	if !errors.Is(c.Err(), ErrKeepAliveTimeout) {
		t.Fatalf("Err() = %v, want ErrKeepAliveTimeout", c.Err())
	}
	if !errors.Is(c.Err(), ErrKeepAliveTimeout) {
		t.Fatalf("Err() = %v, want ErrKeepAliveTimeout", c.Err())
	}
}

// TestKeepAliveDeclaresDeadASilentBrokerWhileATrickleOfWritesGoesOn: a frozen broker's
// kernel (or, on a black-holed network, our own) takes a trickle of small writes into
// socket buffers that are far from full, so each write completes at once and tells
// nothing about the broker reading. Counted as reading, they excused its silence for
// as long as they went on (until 32 MiB followed the PING: hours at a few KB/s), so a
// connection to a frozen or black-holed broker carrying a quiet producer's records was
// never declared dead, and every record on it failed its send timeout in turn. The stub
// reads everything and answers nothing, as a frozen broker's kernel does until its
// buffers fill (far more than this test writes).
func TestKeepAliveDeclaresDeadASilentBrokerWhileATrickleOfWritesGoesOn(t *testing.T) {
	s := newStub(t, nil) // reads every frame, answers none
	c, err := Dial(context.Background(), Options{Addr: s.srv.Addr(), KeepAlive: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.After(30 * time.Second)
	trickle := time.NewTicker(10 * time.Millisecond)
	defer trickle.Stop()
	for id := uint64(1); ; id++ {
		select {
		case <-c.Done():
		case <-deadline:
			t.Fatal("a broker silent for 30 s was never declared dead while a few small frames were written now and then")
		case <-trickle.C:
			if err := c.Send(lookup(id)); err == nil {
				continue
			}
			<-c.Done()
		}
		break
	}
	if !errors.Is(c.Err(), ErrKeepAliveTimeout) {
		t.Fatalf("Err() = %v, want ErrKeepAliveTimeout", c.Err())
	}
}
