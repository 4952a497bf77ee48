// One client connection: its reader loop, its writes, and the dispatch of each
// command to the method that answers it.

package pulsartest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

type serverConn struct {
	b         *Broker
	nc        net.Conn
	wmu       sync.Mutex
	producers map[uint64]string // id -> topic; guarded by b.mu
	names     map[uint64]string // id -> producer name; guarded by b.mu
	received  int
	frozen    bool // StopReading; guarded by b.mu
	gone      chan struct{}
	killOnce  sync.Once
}

func (c *serverConn) kill() {
	c.killOnce.Do(func() {
		close(c.gone)
		c.nc.Close()
	})
}

func (c *serverConn) isFrozen() bool {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	return c.frozen
}

func (c *serverConn) write(cmd *pb.BaseCommand) {
	buf, err := frame.AppendCommand(nil, cmd)
	if err != nil {
		panic(err)
	}
	c.writeRaw(buf)
}

func (c *serverConn) writeRaw(buf []byte) {
	if c.isFrozen() {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.nc.Write(buf)
}

func (c *serverConn) serve() {
	defer c.b.wg.Done()
	defer func() {
		c.kill()
		c.b.mu.Lock()
		delete(c.b.conns, c)
		kept := c.b.subs[:0]
		for _, s := range c.b.subs {
			if s.c != c {
				kept = append(kept, s)
			}
		}
		c.b.subs = kept
		c.b.watchers = slices.DeleteFunc(c.b.watchers, func(w *topicWatcher) bool { return w.c == c })
		c.b.mu.Unlock()
	}()
	br := bufio.NewReader(throttledReader{c})
	for {
		var prefix [4]byte
		if _, err := io.ReadFull(br, prefix[:]); err != nil {
			return
		}
		if c.isFrozen() {
			<-c.gone // read nothing more until the connection ends
			return
		}
		n := binary.BigEndian.Uint32(prefix[:])
		c.b.mu.Lock()
		limit := int(c.b.maxMessageSize) + frame.Padding
		c.b.mu.Unlock()
		if int64(n) > int64(limit) {
			return // what a broker does with a frame above its limit: close the connection
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		c.b.mu.Lock()
		if c.b.corruptSends > 0 && len(body) > 0 {
			var peek frame.Frame
			if frame.Decode(body, &peek) == nil && peek.Cmd.GetType() == pb.BaseCommand_SEND {
				c.b.corruptSends--
				body[len(body)-1] ^= 0xff // as if a bit flipped on the way
			}
		}
		c.b.mu.Unlock()
		var f frame.Frame
		if err := frame.Decode(body, &f); err != nil {
			if errors.Is(err, frame.ErrChecksum) && f.Cmd.GetType() == pb.BaseCommand_SEND {
				// What a broker does with a corrupt message: refuse it, keep the connection.
				// Held with the receipts while they are held: a broker answers one
				// producer's SENDs in order.
				s := f.Cmd.GetSend()
				refusal := &pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
					ProducerId: s.ProducerId, SequenceId: proto.Uint64(refusedSequenceID(s)), Error: pb.ServerError_ChecksumError.Enum(),
					Message: proto.String("pulsartest: checksum mismatch")}}
				c.b.mu.Lock()
				if c.b.holdReceipts {
					c.b.held = append(c.b.held, func() { c.write(refusal) })
					c.b.mu.Unlock()
					continue
				}
				c.b.mu.Unlock()
				c.write(refusal)
				continue
			}
			return
		}
		c.b.mu.Lock()
		c.b.frames[f.Cmd.GetType()]++
		c.received++
		drop := c.b.dropAfter > 0 && c.received >= c.b.dropAfter
		c.b.mu.Unlock()
		if drop {
			return
		}
		if c.refused(&f) {
			continue
		}
		if handled, closeConn := c.controlled(&f); closeConn {
			return
		} else if handled {
			continue
		}
		// Decided before answering, so the client cannot see the answer before the
		// close is committed to.
		c.b.mu.Lock()
		closeNow := c.b.closeAfter[f.Cmd.GetType()] > 0
		if closeNow {
			c.b.closeAfter[f.Cmd.GetType()]--
		}
		c.b.mu.Unlock()
		c.handle(&f)
		if closeNow {
			return
		}
	}
}

// handle answers one command, each family in its own method.
func (c *serverConn) handle(f *frame.Frame) {
	cmd := f.Cmd
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		c.connect(cmd.GetConnect())
	case pb.BaseCommand_PING:
		c.ping()
	case pb.BaseCommand_PARTITIONED_METADATA:
		c.partitionedMetadata(cmd.GetPartitionMetadata())
	case pb.BaseCommand_AUTH_RESPONSE:
		c.authResponse(cmd.GetAuthResponse())
	case pb.BaseCommand_LOOKUP:
		c.lookup(cmd.GetLookupTopic())
	case pb.BaseCommand_PRODUCER:
		c.producer(cmd.GetProducer())
	case pb.BaseCommand_GET_SCHEMA:
		c.getSchema(cmd.GetGetSchema())
	case pb.BaseCommand_CLOSE_PRODUCER:
		c.closeProducer(cmd.GetCloseProducer())
	case pb.BaseCommand_SEND:
		c.send(f)
	case pb.BaseCommand_SUBSCRIBE:
		c.subscribe(cmd.GetSubscribe())
	case pb.BaseCommand_FLOW:
		c.flow(cmd.GetFlow())
	case pb.BaseCommand_ACK:
		c.ack(cmd.GetAck())
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		c.redeliver(cmd.GetRedeliverUnacknowledgedMessages())
	case pb.BaseCommand_CLOSE_CONSUMER:
		c.closeConsumer(cmd.GetCloseConsumer())
	case pb.BaseCommand_SEEK:
		c.seek(cmd.GetSeek())
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		c.getTopics(cmd.GetGetTopicsOfNamespace())
	case pb.BaseCommand_WATCH_TOPIC_LIST:
		c.watchTopics(cmd.GetWatchTopicList())
	case pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:
		c.closeWatcher(cmd.GetWatchTopicListClose())
	}
}
