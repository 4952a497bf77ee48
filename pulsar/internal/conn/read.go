package conn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/framepool"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

func readFrame(br *bufio.Reader, f *frame.Frame, maxFrame int) error {
	var prefix [4]byte
	if _, err := io.ReadFull(br, prefix[:]); err != nil {
		return err
	}
	n, err := frame.ReadSize(prefix, maxFrame)
	if err != nil {
		return err
	}
	// A large frame is read into a pooled buffer: the consumer that adopts it gives it
	// back once every message pointing into it is released (framepool); otherwise it is
	// left to the collector, as an allocated one is.
	pooled := framepool.Get(n)
	var body []byte
	if pooled != nil {
		body = pooled.Bytes()
	} else {
		body = make([]byte, n)
	}
	if _, err := io.ReadFull(br, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	err = frame.Decode(body, f)
	f.Buf = pooled
	return err
}

func (c *Conn) readLoop(br *bufio.Reader) {
	defer c.wg.Done()
	maxFrame := c.maxMessageSize + frame.Padding
	for {
		var f frame.Frame
		err := readFrame(br, &f, maxFrame)
		if err != nil && !errors.Is(err, frame.ErrChecksum) {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("the broker closed the connection: %w", err)
			}
			c.closeWith(err)
			return
		}
		c.lastReceived.Store(time.Now().UnixNano())
		c.dispatch(&f, err)
	}
}

func (c *Conn) dispatch(f *frame.Frame, frameErr error) {
	cmd := f.Cmd
	switch cmd.GetType() {
	case pb.BaseCommand_PING:
		_ = c.Send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	case pb.BaseCommand_PONG:
	case pb.BaseCommand_SEND_RECEIPT:
		if h := c.producer(cmd.GetSendReceipt().GetProducerId()); h != nil {
			h.HandleReceipt(cmd.GetSendReceipt())
		}
	case pb.BaseCommand_SEND_ERROR:
		if h := c.producer(cmd.GetSendError().GetProducerId()); h != nil {
			h.HandleSendError(cmd.GetSendError())
		}
	case pb.BaseCommand_CLOSE_PRODUCER:
		id := cmd.GetCloseProducer().GetProducerId()
		if h := c.takeProducer(id); h != nil {
			h.HandleClose(fmt.Errorf("%w: the broker closed producer %d (topic unloaded or moved)", ErrClosed, id))
		}
	case pb.BaseCommand_MESSAGE:
		if h := c.consumer(cmd.GetMessage().GetConsumerId()); h != nil {
			h.HandleMessage(cmd.GetMessage(), f, frameErr)
		}
	case pb.BaseCommand_CLOSE_CONSUMER:
		id := cmd.GetCloseConsumer().GetConsumerId()
		if h := c.takeConsumer(id); h != nil {
			h.HandleClose(fmt.Errorf("%w: the broker closed consumer %d (topic unloaded or moved)", ErrClosed, id))
		}
	case pb.BaseCommand_REACHED_END_OF_TOPIC:
		if h := c.consumer(cmd.GetReachedEndOfTopic().GetConsumerId()); h != nil {
			h.HandleEndOfTopic()
		}
	case pb.BaseCommand_ACTIVE_CONSUMER_CHANGE:
		if h := c.consumer(cmd.GetActiveConsumerChange().GetConsumerId()); h != nil {
			h.HandleActiveChange(cmd.GetActiveConsumerChange().GetIsActive())
		}
	case pb.BaseCommand_TOPIC_MIGRATED:
		m := cmd.GetTopicMigrated()
		reason := fmt.Errorf("%w: the topic migrated to %s", ErrClosed, m.GetBrokerServiceUrl())
		if m.GetResourceType() == pb.CommandTopicMigrated_Producer {
			if h := c.takeProducer(m.GetResourceId()); h != nil {
				h.HandleClose(reason)
			}
		} else if h := c.takeConsumer(m.GetResourceId()); h != nil {
			h.HandleClose(reason)
		}
	case pb.BaseCommand_WATCH_TOPIC_UPDATE:
		u := cmd.GetWatchTopicUpdate()
		c.mu.Lock()
		h := c.watchers[u.GetWatcherId()]
		c.mu.Unlock()
		if h != nil {
			h.HandleTopicUpdate(u)
		}
	case pb.BaseCommand_AUTH_CHALLENGE:
		resp, data, err := c.authResponse()
		if err != nil {
			c.closeWith(err)
			return
		}
		c.mu.Lock()
		if !c.closed {
			c.tail = append(c.tail, resp...)
			c.kickWriter()
		}
		c.mu.Unlock()
		c.log.Debug("answered AUTH_CHALLENGE with fresh credentials", "method", c.opts.Auth.Method(), "credentials", Fingerprint(data))
	default:
		id, ok := requestID(cmd)
		if !ok {
			c.log.Debug("ignoring unexpected command", "type", cmd.GetType().String())
			return
		}
		c.mu.Lock()
		ch := c.requests[id]
		c.mu.Unlock()
		if ch != nil {
			select {
			case ch <- cmd:
			default:
			}
		}
	}
}

func requestID(cmd *pb.BaseCommand) (uint64, bool) {
	switch cmd.GetType() {
	case pb.BaseCommand_SUCCESS:
		return cmd.GetSuccess().GetRequestId(), true
	case pb.BaseCommand_ERROR:
		return cmd.GetError().GetRequestId(), true
	case pb.BaseCommand_PRODUCER_SUCCESS:
		return cmd.GetProducerSuccess().GetRequestId(), true
	case pb.BaseCommand_LOOKUP_RESPONSE:
		return cmd.GetLookupTopicResponse().GetRequestId(), true
	case pb.BaseCommand_PARTITIONED_METADATA_RESPONSE:
		return cmd.GetPartitionMetadataResponse().GetRequestId(), true
	case pb.BaseCommand_ACK_RESPONSE:
		return cmd.GetAckResponse().GetRequestId(), true
	case pb.BaseCommand_GET_SCHEMA_RESPONSE:
		return cmd.GetGetSchemaResponse().GetRequestId(), true
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE:
		return cmd.GetGetTopicsOfNamespaceResponse().GetRequestId(), true
	case pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS:
		return cmd.GetWatchTopicListSuccess().GetRequestId(), true
	}
	return 0, false
}

func (c *Conn) producer(id uint64) ProducerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.producers[id]
}

func (c *Conn) takeProducer(id uint64) ProducerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.producers[id]
	delete(c.producers, id)
	return h
}

func (c *Conn) consumer(id uint64) ConsumerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumers[id]
}

func (c *Conn) takeConsumer(id uint64) ConsumerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.consumers[id]
	delete(c.consumers, id)
	return h
}
