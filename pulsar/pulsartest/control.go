package pulsartest

import (
	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Command is one command a client sent, as the broker read it, for a Control.
type Command struct {
	// Cmd is the command; Cmd.GetType() says which, and its getters read its fields
	// (Cmd.GetSend().GetSequenceId(), Cmd.GetProducer().GetTopic(), ...).
	Cmd *BaseCommand
	// Metadata and Payload are a SEND's message, as sent (Metadata encoded).
	Metadata, Payload []byte
}

// Reply is what a Control decides for a command.
type Reply struct {
	kind    replyKind
	code    ServerError
	message string
}

type replyKind uint8

const (
	replyPass replyKind = iota
	replyIgnore
	replyRefuse
	replyDisconnect
)

// Pass lets the broker handle the command as it would without the Control.
func Pass() Reply { return Reply{} }

// Ignore drops the command unanswered, as a broker that stopped answering would.
func Ignore() Reply { return Reply{kind: replyIgnore} }

// Refuse answers the command with the error code and message: ERROR for a command
// with a request id (PRODUCER, SUBSCRIBE, LOOKUP, PARTITIONED_METADATA, ...),
// SEND_ERROR for SEND (held with the receipts while HoldReceipts holds them). A command
// that has no way to carry an error is ignored.
func Refuse(code ServerError, message string) Reply {
	return Reply{kind: replyRefuse, code: code, message: message}
}

// Disconnect closes the client's connection without answering the command.
func Disconnect() Reply { return Reply{kind: replyDisconnect} }

// Control is called for every command the broker reads, in order, before the broker
// handles it (after the faults RefuseNext and DropAfterFrames inject). It runs on the
// connection's reading goroutine, so it must not block; a test keeps its own state
// behind its own lock.
type Control func(Command) Reply

// SetControl installs fn (nil removes it): the one hook that intercepts commands, for
// faults the broker has no method for.
func (b *Broker) SetControl(fn Control) {
	b.mu.Lock()
	b.control = fn
	b.mu.Unlock()
}

// controlled applies the Control, if any, to f; true when the broker must not handle
// it, false to go on; close is true when the connection must close.
func (c *serverConn) controlled(f *frame.Frame) (handled, close bool) {
	c.b.mu.Lock()
	fn := c.b.control
	c.b.mu.Unlock()
	if fn == nil {
		return false, false
	}
	r := fn(Command{Cmd: f.Cmd, Metadata: f.Metadata, Payload: f.Payload})
	switch r.kind {
	case replyIgnore:
		return true, false
	case replyDisconnect:
		return true, true
	case replyRefuse:
		c.answerError(f, r.code, r.message)
		return true, false
	}
	return false, false
}

// answerError answers f with code: ERROR with f's request id, or SEND_ERROR for a
// SEND; false when f is a command that carries neither.
func (c *serverConn) answerError(f *frame.Frame, code ServerError, message string) bool {
	if s := f.Cmd.GetSend(); f.Cmd.GetType() == pb.BaseCommand_SEND && s != nil {
		refusal := &pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
			ProducerId: s.ProducerId, SequenceId: proto.Uint64(refusedSequenceID(s)), Error: code.Enum(), Message: proto.String(message)}}
		c.b.mu.Lock()
		if c.b.holdReceipts {
			// Held in order with the receipts: a broker answers one producer's SENDs in order.
			c.b.held = append(c.b.held, func() { c.write(refusal) })
			c.b.mu.Unlock()
			return true
		}
		c.b.mu.Unlock()
		c.write(refusal)
		return true
	}
	reqID, ok := requestID(f.Cmd)
	if !ok {
		return false
	}
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
		RequestId: proto.Uint64(reqID), Error: code.Enum(), Message: proto.String(message)}})
	return true
}

// requestID finds the request id of a command that has one, whatever its type: every
// request message of the protocol names it request_id.
func requestID(cmd *pb.BaseCommand) (uint64, bool) {
	var found uint64
	ok := false
	cmd.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		inner := v.Message()
		if f := inner.Descriptor().Fields().ByName("request_id"); f != nil && inner.Has(f) {
			found, ok = inner.Get(f).Uint(), true
			return false
		}
		return true
	})
	return found, ok
}
