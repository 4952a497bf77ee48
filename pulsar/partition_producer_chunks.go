package pulsar

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/compress"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// chunkFieldsRoom is what the chunk fields (uuid, counts, sizes) add to a chunk's metadata.
func chunkFieldsRoom(producerName string) int { return 64 + len(producerName) + 20 }

// chunkWindow is how many chunks of one message may await receipts at once.
const chunkWindow = 2

// sendChunked publishes one message of size bytes as chunks, reading the payload from r
// (or m.Payload when r is nil) one chunk at a time.
func (p *partitionProducer) sendChunked(ctx context.Context, m *ProducerMessage, r io.Reader, size int64) (MessageID, error) {
	type result struct {
		id  MessageID
		err error
	}
	done := make(chan result, 1)
	if err := p.queueChunks(ctx, m, r, size, false, func(id MessageID, err error) { done <- result{id, err} }); err != nil {
		return MessageID{}, err
	}
	select {
	case res := <-done:
		return res.id, res.err
	case <-ctx.Done():
		// The message stays queued; its outcome is no longer reported to this caller.
		return MessageID{}, ctx.Err()
	}
}

// queueChunks queues one message of size bytes as chunks, read from r (or m.Payload
// when r is nil). With all, every chunk is queued before it returns (bounded by the
// pending limits), so m.Payload is not read afterwards; otherwise at most chunkWindow
// chunks await receipts at once, so a streamed message of any size costs two chunk
// buffers. done runs exactly once, with the last chunk's outcome, unless queueChunks
// returns an error (then it never runs). done must not block.
func (p *partitionProducer) queueChunks(ctx context.Context, m *ProducerMessage, r io.Reader, size int64, all bool, done func(MessageID, error)) error {
	if size > p.opts.MaxChunkedMessageSize {
		return fmt.Errorf("%w: %d bytes, MaxChunkedMessageSize is %d", ErrMessageTooLarge, size, p.opts.MaxChunkedMessageSize)
	}
	c := &chunking{m: m, r: r, size: size, uncompressed: size, done: done}
	if r == nil {
		payload := m.Payload
		if p.opts.Compression != NoCompression {
			compressed, err := compress.Compress(p.opts.Compression.pb(), nil, m.Payload)
			if err == nil {
				c.compressedFrom, payload = m.Payload, compressed
			}
		}
		c.r = byteReader(payload)
		c.size = int64(len(payload))
	}
	// total_chunk_msg_size is an int32 and uncompressed_size a uint32 on the wire: a
	// larger message would be announced truncated, so consumers would misassemble it.
	if c.size > math.MaxInt32 || c.uncompressed > math.MaxUint32 {
		return fmt.Errorf("%w: %d bytes, the protocol's chunked message size field holds at most %d", ErrMessageTooLarge, max(c.size, c.uncompressed), math.MaxInt32)
	}
	if err := p.lock(ctx); err != nil {
		return err
	}
	defer p.unlock() // until every chunk is queued: other messages may follow then
	if err := p.planChunks(c); err != nil {
		return err
	}
	// A streamed message has at most chunkWindow chunks awaiting their receipts, so a
	// message of any size costs chunkWindow chunk buffers. A buffer is reused once its
	// chunk is persisted (after a failure it may still be queued for writing, so it is
	// dropped instead).
	windowSize := chunkWindow
	if all {
		windowSize = c.numChunks
	}
	c.window = make(chan struct{}, windowSize)
	c.free = make(chan []byte, chunkWindow)
	for i := range c.numChunks {
		if err := p.queueChunk(ctx, c, i); err != nil {
			return err
		}
	}
	return nil
}

// chunking is one message being queued as chunks.
type chunking struct {
	m              *ProducerMessage
	r              io.Reader
	size           int64  // the payload's bytes, as sent (compressed, if it is)
	uncompressed   int64  // before compression
	compressedFrom []byte // the uncompressed payload, when the chunks carry it compressed
	chunkSize      int
	numChunks      int
	seq            uint64
	uuid           string
	window         chan struct{} // a slot per chunk awaiting its receipt
	free           chan []byte   // chunk buffers whose chunk was persisted
	done           func(MessageID, error)

	mu     sync.Mutex
	failed error // the first chunk's failure: the message cannot be whole
}

// fail records the first failure of one of c's chunks.
func (c *chunking) fail(err error) {
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	c.mu.Unlock()
}

func (c *chunking) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// planChunks sizes the chunks so that every frame, which carries the message's metadata
// again, fits the broker's limit, and takes the message's sequence id (a chunk is always
// an entry of its own; the open batch goes first, so sequence ids stay in order).
func (p *partitionProducer) planChunks(c *chunking) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.errLocked(); err != nil {
		return err
	}
	overhead := messageOverhead(c.m, p.name) + chunkFieldsRoom(p.name)
	room := p.maxMsgSize - overhead
	if room < 1024 {
		return fmt.Errorf("%w: the metadata (%d bytes with key and properties) leaves no room for a chunk under the broker's limit of %d",
			ErrMessageTooLarge, overhead, p.maxMsgSize)
	}
	c.chunkSize = p.opts.ChunkSize
	if c.chunkSize == 0 || c.chunkSize > room {
		c.chunkSize = room
	}
	seq, _, err := p.nextSeqLocked(c.m)
	if err != nil {
		return err
	}
	if len(p.batch.reqs) > 0 {
		p.flushBatchLocked()
	}
	c.seq, c.uuid = seq, fmt.Sprintf("%s-%d", p.name, seq)
	c.numChunks = max(int((c.size+int64(c.chunkSize)-1)/int64(c.chunkSize)), 1)
	return nil
}

// queueChunk reads chunk i of c, once a window slot and the pending limits allow, and
// queues it.
func (p *partitionProducer) queueChunk(ctx context.Context, c *chunking, i int) error {
	n := int(min(int64(c.chunkSize), c.size-int64(i)*int64(c.chunkSize)))
	select {
	case c.window <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return ErrProducerClosed
	}
	// A chunk that failed (a send timeout, a refusal) is not sent again: the chunks
	// after it would make a message no consumer can assemble, reported persisted.
	if err := c.failure(); err != nil {
		return fmt.Errorf("pulsar: chunk %d of %d for %s not sent: an earlier chunk failed: %w", i, c.numChunks, p.topic, err)
	}
	if err := p.limiter.acquire(ctx, 1, n, p.done); err != nil {
		return err
	}
	var buf []byte
	select {
	case buf = <-c.free:
		buf = buf[:frameHeadroom+n]
	default:
		buf = make([]byte, frameHeadroom+n, frameHeadroom+c.chunkSize) // read in place behind the frame header's room
	}
	if _, err := io.ReadFull(c.r, buf[frameHeadroom:]); err != nil {
		p.limiter.release(1, n)
		return fmt.Errorf("pulsar: reading chunk %d of %d for %s: %w (the chunks already sent expire at consumers)", i, c.numChunks, p.topic, err)
	}
	p.mu.Lock()
	if err := p.errLocked(); err != nil {
		p.mu.Unlock()
		p.limiter.release(1, n)
		return err
	}
	md := p.metadataLocked(c.seq)
	setMessageFields(md, c.m)
	md.Uuid = proto.String(c.uuid)
	md.NumChunksFromMsg = proto.Int32(int32(c.numChunks))
	md.TotalChunkMsgSize = proto.Int32(int32(c.size))
	md.ChunkId = proto.Int32(int32(i))
	// Set even when uncompressed: the official Go consumer needs it to use the
	// reassembled payload rather than the last chunk's.
	md.UncompressedSize = proto.Uint32(uint32(c.uncompressed))
	if c.compressedFrom != nil {
		md.Compression = p.opts.Compression.pb().Enum()
	}
	// Each chunk's send timeout runs from when its bytes were read, not from the
	// first chunk: an upload slower than the timeout is fine while every chunk is
	// persisted in time.
	it := &pendingItem{seq: c.seq, highestSeq: c.seq, chunk: true, numMsgs: 1, bytes: n, created: time.Now()}
	last := i == c.numChunks-1
	it.reqs = []sendRequest{{direct: true, callback: func(mid MessageID, err error) {
		if err == nil {
			select {
			case c.free <- buf:
			default:
			}
		} else {
			c.fail(err)
		}
		<-c.window
		if last {
			if err == nil {
				err = c.failure() // an earlier chunk's: the message is not whole
			}
			if err != nil {
				mid = MessageID{}
			}
			c.done(mid, err)
		}
	}}}
	send := &pb.CommandSend{ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(c.seq), IsChunk: proto.Bool(true)}
	p.appendItemLocked(it, send, md, buf, frameHeadroom)
	p.mu.Unlock()
	return nil
}

type sliceReader struct{ b []byte }

func byteReader(b []byte) io.Reader { return &sliceReader{b} }

func (s *sliceReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}
