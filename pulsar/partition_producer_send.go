package pulsar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/compress"
	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// messageOverhead bounds from above what m adds to the entry carrying it besides its
// payload: the metadata (producer name, key, properties, ... repeated in every chunk of
// a chunked message) and the SEND command. A message whose payload and overhead exceed
// the broker's limit is chunked; chunks are sized so that each, metadata included, fits.
func messageOverhead(m *ProducerMessage, producerName string) int {
	n := 160 + len(producerName) + len(m.Key) + len(m.OrderingKey)
	for k, v := range m.Properties {
		n += len(k) + len(v) + 12
	}
	if m.Extra.Key != "" {
		n += len(m.Extra.Key) + len(m.Extra.Value) + 12
	}
	return n
}

type sendRequest struct {
	callback func(MessageID, error)
	// direct callbacks only hand the result to a buffered channel (a synchronous Send):
	// they run at once, wherever the result is known, so a Send made from inside another
	// callback cannot wait on the dispatcher that is running it.
	direct bool
}

// deliver runs req's callback directly or queues it for the dispatcher.
func deliver(cs []completion, req sendRequest, id MessageID, err error) []completion {
	if req.callback == nil {
		return cs
	}
	if req.direct {
		req.callback(id, err)
		return cs
	}
	return append(cs, completion{req.callback, id, err})
}

// pendingItem is one SEND frame waiting for its receipt: a batch, a single message, or
// one chunk of a chunked message. The frame is kept to be resent after a reconnect.
type pendingItem struct {
	seq, highestSeq uint64
	frame           []byte
	reqs            []sendRequest // callbacks completed by this item's receipt
	batched         bool
	chunk           bool // one chunk of a chunked message (its chunks share seq)
	// corrupt: the broker answered this item with ChecksumError, so it was not stored; a
	// later duplicate answer for it (deduplication) is a loss to report, not a success.
	corrupt bool
	// refusal is the broker's refusal of this item on the last connection it was sent on
	// (a SEND_ERROR that resets the connection): it was not stored there.
	refusal *ServerError
	// settled, once set, settles the item when it reaches the head of the queue, and it
	// is never sent again: answer is the id the broker stored it under (read while a
	// connection was drained after a refusal ahead of it), or err the failure to report.
	settled bool
	answer  *pb.MessageIdData
	err     error
	// answered: the connection being drained (see drain) answered this item.
	answered bool
	numMsgs  int // messages counted by the limiter
	bytes    int // bytes counted by the limiter
	created  time.Time
	// buf is the batch buffer frame was built in, given back (putBatchBuf) when the
	// item is taken off the queue answered (popAnsweredLocked); nil when frame is not in
	// a pooled buffer.
	buf []byte
}

// frameHeadroom is kept free in front of a batch's payload for the frame header, so a
// batch is framed in place instead of being copied (see frame.PayloadInPlace).
const frameHeadroom = 512

type batch struct {
	buf      []byte // frameHeadroom unused bytes, then the encoded messages
	reqs     []sendRequest
	firstSeq uint64
	lastSeq  uint64
	created  time.Time
	// key and orderingKey are the first message's: the entry carries them, as the Java
	// client's batch container does, so a Key_Shared subscription dispatches it by them.
	key         string
	orderingKey []byte
	// acquired is what the batch's messages took from the pending limiter (their payload
	// bytes), released exactly when the batch completes; size() counts the encoding too.
	acquired int
}

// size is the number of payload bytes in the batch.
func (b *batch) size() int { return max(len(b.buf)-frameHeadroom, 0) }

// lock takes the producer's enqueueing turn, giving up when ctx ends or the producer
// closes. An uncontended turn is taken with one non-blocking send: the select over
// three channels locked all three (and sorted them) for every message, a few percent of
// the ingress path's CPU. A context that has ended fails at once, as it would waiting.
func (p *partitionProducer) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case p.exclusive <- struct{}{}:
		return nil
	default:
	}
	select {
	case p.exclusive <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return ErrProducerClosed
	}
}

func (p *partitionProducer) unlock() { <-p.exclusive }

// sendAsync queues m; cb (if not nil) runs on the dispatcher once the message is
// persisted or has failed. It blocks while the pending queue is full.
func (p *partitionProducer) sendAsync(ctx context.Context, m *ProducerMessage, cb func(MessageID, error), direct bool) {
	p.mu.Lock()
	maxSize, name := p.maxMsgSize, p.name
	p.mu.Unlock()
	overhead := messageOverhead(m, name) // once: it walks the properties
	if len(m.Payload)+overhead > maxSize {
		if p.opts.DisableChunking {
			p.complete(cb, direct, fmt.Errorf("%w: %d bytes and %d of metadata, the broker's limit is %d and chunking is off",
				ErrMessageTooLarge, len(m.Payload), overhead, maxSize))
			return
		}
		// Queued here and now, chunk by chunk (each copied into its frame), so the
		// caller's slice is not read after SendAsync returns and the message keeps its
		// place among the messages sent before and after it.
		req := sendRequest{callback: cb, direct: direct}
		err := p.queueChunks(ctx, m, nil, int64(len(m.Payload)), true, func(id MessageID, err error) {
			p.cbs.push(deliver(nil, req, id, err)...)
		})
		if err != nil {
			p.complete(cb, direct, err)
		}
		return
	}
	if err := p.lock(ctx); err != nil {
		p.complete(cb, direct, err)
		return
	}
	defer p.unlock()
	if err := p.limiter.acquire(ctx, 1, len(m.Payload), p.done); err != nil {
		p.complete(cb, direct, err)
		return
	}
	p.mu.Lock()
	if err := p.errLocked(); err != nil {
		p.mu.Unlock()
		p.limiter.release(1, len(m.Payload))
		p.complete(cb, direct, err)
		return
	}
	seq, alone, err := p.nextSeqLocked(m)
	if err != nil {
		p.mu.Unlock()
		p.limiter.release(1, len(m.Payload))
		p.complete(cb, direct, err)
		return
	}
	req := sendRequest{callback: cb, direct: direct}
	if p.opts.DisableBatching || alone {
		if len(p.batch.reqs) > 0 {
			p.flushBatchLocked() // sequence ids leave in the order they came
		}
		p.enqueueSingleLocked(seq, m, req)
		p.mu.Unlock()
		return
	}
	if p.name != name {
		overhead = messageOverhead(m, p.name) // renamed by a reconnect meanwhile
	}
	if len(p.batch.reqs) > 0 && (p.batch.size()+len(m.Payload)+overhead > min(p.opts.BatchingMaxBytes, p.maxMsgSize-1024) ||
		(p.opts.BatchingByKey && m.Key != p.batch.key)) {
		p.flushBatchLocked()
	}
	if len(p.batch.reqs) == 0 {
		p.batch.key, p.batch.orderingKey = m.Key, bytes.Clone(m.OrderingKey)
	}
	if len(p.batch.reqs) == 0 {
		p.batch.firstSeq = seq
		p.batch.created = time.Now()
	}
	p.batch.lastSeq = seq
	if p.batch.buf == nil {
		// Size the buffer like the previous batch, so a busy producer fills it without
		// growing (copying) and an idle one does not hold 128 KiB per lone message.
		size := min(max(p.lastBatchBytes+p.lastBatchBytes/8, len(m.Payload)+256), p.opts.BatchingMaxBytes+len(m.Payload)+256)
		p.batch.buf = getBatchBuf(frameHeadroom, frameHeadroom+size)
		p.batch.reqs = make([]sendRequest, 0, min(max(p.lastBatchMsgs, 1), p.opts.BatchingMaxMessages))
	}
	if need := len(p.batch.buf) + singleMessageBound(m); need > cap(p.batch.buf) {
		// A batch larger than the last one: grow into a pooled buffer, not by append,
		// whose new buffer is garbage the pools never see (batches of one message
		// while the window has room, then a full one when it fills, grew every time).
		nb := getBatchBuf(len(p.batch.buf), max(need, 2*cap(p.batch.buf)))
		copy(nb, p.batch.buf)
		putBatchBuf(p.batch.buf)
		p.batch.buf = nb
	}
	p.batch.buf = appendSingleMessage(p.batch.buf, seq, m)
	p.batch.reqs = append(p.batch.reqs, req)
	p.batch.acquired += len(m.Payload)
	if len(p.batch.reqs) >= p.opts.BatchingMaxMessages || p.batch.size() >= p.opts.BatchingMaxBytes || p.brokerKeepsUpLocked() {
		p.flushBatchLocked()
	}
	p.mu.Unlock()
}

// brokerKeepsUpLocked reports whether the open batch may leave at once: no connection is
// being drained after a refusal (what leaves then waits for the reconnection anyway), and
// fewer than BatchingMaxInFlight entries await their receipts, or (a window above one)
// fewer than windowStretch times as many, carrying no more messages than that in all.
//
// Holding a message until every entry in flight is answered (a window of one) makes it
// wait for another record's round trip and then its own whenever records come more often
// than the broker's round trip: a median 1.5x the WebSocket producer's at 1 000 records/s
// in one run. A fixed window of 8 still held records at 5 000/s (a round trip of 3 ms has
// 15 in flight: +0.7 ms at the median), and a fixed window of 32 cost throughput at
// saturation (entries of a few messages each where the broker would take one large one).
// Counting messages beyond the window tells the two apart: records that come one by one
// at a rate the broker keeps up with are in flight in entries of one or two and leave at
// once up to the stretched window; records that come faster than the broker answers fill
// entries of many, the messages in flight pass the bound, and they share entries.
func (p *partitionProducer) brokerKeepsUpLocked() bool {
	if p.drain != nil {
		return false
	}
	w := p.opts.BatchingMaxInFlight
	n := len(p.pending)
	if n < w {
		return true
	}
	if w < 2 || n >= windowStretch*w {
		return false // a window of one writes nothing behind an unanswered entry
	}
	return p.pendingMsgs+len(p.batch.reqs) <= windowStretch*w
}

// windowStretch bounds the in-flight window while its entries carry a message or so each
// (see brokerKeepsUpLocked): up to windowStretch*BatchingMaxInFlight entries, and as many
// messages.
const windowStretch = 4

// nextSeqLocked chooses m's sequence id: the next one, or (Deduplication) the caller's.
// alone says the message must not share an entry: its id is not above every id the
// broker may already hold from this producer's name, and the broker judges a batch as
// a duplicate by its first id.
func (p *partitionProducer) nextSeqLocked(m *ProducerMessage) (seq uint64, alone bool, err error) {
	if !p.opts.Deduplication {
		if m.SequenceID != nil {
			return 0, false, fmt.Errorf("%w: %s: a SequenceID needs a producer with Deduplication", ErrSequence, p.topic)
		}
		seq = p.seq
		p.seq++
		return seq, false, nil
	}
	if m.SequenceID == nil || *m.SequenceID < 0 {
		return 0, false, fmt.Errorf("%w: %s: a producer with Deduplication needs a SequenceID from 0 to 2^63-1 on every message", ErrSequence, p.topic)
	}
	id := *m.SequenceID
	alone = id <= p.dedupFloor
	p.dedupFloor = max(p.dedupFloor, id)
	if uint64(id) >= p.seq {
		p.seq = uint64(id) + 1 // flush waits for everything below p.seq
	}
	return uint64(id), alone, nil
}

// complete reports a result for a message that never entered the queue.
func (p *partitionProducer) complete(cb func(MessageID, error), direct bool, err error) {
	p.cbs.push(deliver(nil, sendRequest{callback: cb, direct: direct}, MessageID{}, err)...)
}

func (p *partitionProducer) metadataLocked(seq uint64) *pb.MessageMetadata {
	return &pb.MessageMetadata{
		ProducerName:  proto.String(p.name),
		SequenceId:    proto.Uint64(seq),
		PublishTime:   proto.Uint64(uint64(time.Now().UnixMilli())),
		SchemaVersion: p.schemaVersion,
	}
}

func (p *partitionProducer) flushBatchLocked() {
	b := p.batch
	p.batch = batch{}
	p.lastBatchBytes = b.size()
	p.lastBatchMsgs = len(b.reqs)
	n := len(b.reqs)
	md := p.batchMetadataLocked(&b, n)
	buf, headroom := p.compressLocked(md, b.buf[frameHeadroom:], b.buf)
	send := p.batchSendLocked(&b, n)
	it := &pendingItem{seq: b.firstSeq, highestSeq: b.lastSeq, reqs: b.reqs, batched: true,
		numMsgs: n, bytes: b.acquired, created: b.created}
	if &buf[0] == &b.buf[0] {
		it.buf = b.buf // the frame is built in it: reused once the receipt comes
	}
	p.appendItemLocked(it, send, md, buf, headroom)
	if it.buf == nil || (len(it.frame) > 0 && &it.frame[len(it.frame)-1] != &it.buf[len(it.buf)-1]) {
		// Compressed into another buffer, or framed in a new one (a header larger than
		// the headroom): the batch's own buffer is not referred to any more.
		it.buf = nil
		putBatchBuf(b.buf)
	}
}

// compressLocked returns the payload to send, raw or compressed, and how many unused
// bytes precede it in the returned buffer. framed, when not nil, is raw preceded by
// frameHeadroom bytes; the result then keeps that headroom for frame.PayloadInPlace.
func (p *partitionProducer) compressLocked(md *pb.MessageMetadata, raw, framed []byte) ([]byte, int) {
	// uncompressed_size is set even without compression, as the official producers do:
	// the official Go consumer relies on it to read a reassembled chunked message.
	if md.UncompressedSize != nil {
		*md.UncompressedSize = uint32(len(raw)) // a batch's: the producer's header holds it
	} else {
		md.UncompressedSize = proto.Uint32(uint32(len(raw)))
	}
	headroom := 0
	if framed != nil {
		headroom = frameHeadroom
	}
	if p.opts.Compression == NoCompression {
		if framed != nil {
			return framed, headroom
		}
		return raw, 0
	}
	out, err := compress.Compress(p.opts.Compression.pb(), make([]byte, headroom, headroom+len(raw)/2+64), raw)
	if err != nil {
		p.log.Warn("compression failed; sending uncompressed", "error", err)
		if framed != nil {
			return framed, headroom
		}
		return raw, 0
	}
	md.Compression = p.opts.Compression.pb().Enum()
	return out, headroom
}

func (p *partitionProducer) enqueueSingleLocked(seq uint64, m *ProducerMessage, req sendRequest) {
	md := p.metadataLocked(seq)
	setMessageFields(md, m)
	payload, headroom := p.compressLocked(md, m.Payload, nil)
	send := &pb.CommandSend{ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(seq)}
	p.appendItemLocked(&pendingItem{seq: seq, highestSeq: seq, reqs: []sendRequest{req}, numMsgs: 1, bytes: len(m.Payload), created: time.Now()}, send, md, payload, headroom)
}

func setMessageFields(md *pb.MessageMetadata, m *ProducerMessage) {
	if m.Key != "" {
		md.PartitionKey = proto.String(m.Key)
	}
	if len(m.OrderingKey) > 0 {
		md.OrderingKey = m.OrderingKey
	}
	if !m.EventTime.IsZero() {
		md.EventTime = proto.Uint64(uint64(m.EventTime.UnixMilli()))
	}
	if len(m.Properties) > 0 || m.Extra.Key != "" {
		var few [8]property
		kvs := sortedProperties(few[:0], m.Properties, m.Extra.Key)
		md.Properties = make([]*pb.KeyValue, 0, len(kvs)+1)
		pending := m.Extra.Key != ""
		extra := func() {
			// A copy: the caller may reuse Value once the call returns.
			md.Properties = append(md.Properties, &pb.KeyValue{Key: proto.String(m.Extra.Key), Value: proto.String(string(m.Extra.Value))})
			pending = false
		}
		for _, kv := range kvs {
			if pending && m.Extra.Key < kv.key {
				extra()
			}
			md.Properties = append(md.Properties, &pb.KeyValue{Key: proto.String(kv.key), Value: proto.String(kv.value)})
		}
		if pending {
			extra()
		}
	}
}

// appendItemLocked frames the payload held at buf[headroom:] (in place when the
// headroom allows) and queues it.
func (p *partitionProducer) appendItemLocked(it *pendingItem, send *pb.CommandSend, md *pb.MessageMetadata, buf []byte, headroom int) {
	// The metadata is encoded into the producer's buffer, and the command wrapped in
	// its BaseCommand: both are copied into the frame.
	mdBytes, err := proto.MarshalOptions{}.MarshalAppend(p.header.mdBuf[:0], md)
	if err == nil {
		if cap(mdBytes) <= 64<<10 {
			p.header.mdBuf = mdBytes // not a rare message's large properties
		}
		// The broker closes a connection that carries a frame above its limit: check
		// the encoded frame, metadata included, before it is queued.
		it.frame, err = frame.PayloadInPlace(buf, headroom, p.sendCommandLocked(send), mdBytes, p.maxMsgSize+frame.Padding)
	}
	if errors.Is(err, frame.ErrTooLarge) {
		p.failItemsLocked(it, fmt.Errorf("%w: %s: %w", ErrMessageTooLarge, p.topic, err))
		return
	}
	if err != nil {
		p.failItemsLocked(it, fmt.Errorf("pulsar: encoding a message for %s: %w", p.topic, err))
		return
	}
	p.pending = append(p.pending, it)
	p.pendingMsgs += max(it.numMsgs, 1)
	if p.cn != nil && p.drain == nil {
		// On failure the reconnect resends it; while the connection is drained after a
		// refusal nothing more is written on it, and the reconnect sends it.
		_ = p.cn.SendFrame(it.frame)
	}
}

func (p *partitionProducer) failItemsLocked(it *pendingItem, err error) {
	go p.failItems([]*pendingItem{it}, err)
}

// flush sends the open batch and waits until everything queued so far is settled.
func (p *partitionProducer) flush(ctx context.Context) error {
	p.mu.Lock()
	if len(p.batch.reqs) > 0 {
		p.flushBatchLocked()
	}
	target := p.seq
	p.mu.Unlock()
	for {
		p.mu.Lock()
		if len(p.pending) == 0 || p.pending[0].seq >= target {
			err := p.failed
			p.mu.Unlock()
			return err
		}
		if p.progress == nil {
			p.progress = make(chan struct{})
		}
		ch := p.progress
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
