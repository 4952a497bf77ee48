package pulsar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/delivery"
	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

type entryKey struct{ ledger, entry uint64 }

// batchTracker remembers which indexes of a delivered batch are not acknowledged yet:
// bit i set means index i is outstanding (the PIP-54 ack_set convention).
//
// It outlives a redelivery of its entry that the consumer asks for: the broker sends
// the whole entry again, with an ack_set of what it knows acknowledged (nothing when its
// batch-index acknowledgements are off), so the tracker filters what the application
// acknowledged, and on a Shared or Key_Shared subscription what it still holds: only
// the indexes handed back (nacked) are delivered again. It also gives each of them a
// redelivery count of its own, where the broker keeps one per entry.
type batchTracker struct {
	bits []int64
	size int
	// back: the indexes handed back and not delivered again yet (set only on Shared and
	// Key_Shared subscriptions, with handedBack the last time). The record stays while
	// hand-backs are in flight (asked for, their arrival not come): the broker sends the
	// entry once per request that found it already dispatched again, and each arrival
	// delivers only what is still in back. came: the entry arrived since the last one.
	back       []int64
	handedBack time.Time
	inFlight   int
	came       bool
	// base is the broker's redelivery count when the entry first arrived here; again[i]
	// how many times index i was handed back since.
	base  uint32
	again []uint32
}

func newBatchTracker(size int, ackSet []int64) *batchTracker {
	t := &batchTracker{bits: make([]int64, (size+63)/64), size: size}
	if len(ackSet) > 0 {
		copy(t.bits, ackSet)
		return t
	}
	for i := range size {
		t.bits[i/64] |= 1 << (i % 64)
	}
	return t
}

func (t *batchTracker) clear(i int) {
	if i >= 0 && i < t.size {
		t.bits[i/64] &^= 1 << (i % 64)
	}
}

func (t *batchTracker) outstanding(i int) bool {
	return i >= 0 && i < t.size && t.bits[i/64]&(1<<(i%64)) != 0
}

func (t *batchTracker) done() bool {
	for _, w := range t.bits {
		if w != 0 {
			return false
		}
	}
	return true
}

// handBack records that indexes (nacked) go back to the broker with their entry.
func (t *batchTracker) handBack(indexes []int32, now time.Time) {
	if t.back == nil {
		t.back, t.again = make([]int64, len(t.bits)), make([]uint32, t.size)
	}
	for _, i := range indexes {
		if i >= 0 && int(i) < t.size {
			t.back[i/64] |= 1 << (i % 64)
			t.again[i]++
		}
	}
	t.handedBack = now
	t.inFlight++
	t.came = false
}

// arrived ends the hand-back record once every hand-back in flight has come.
func (t *batchTracker) arrived() {
	t.came = true
	if t.inFlight--; t.inFlight <= 0 {
		clear(t.back)
		t.handedBack, t.inFlight = time.Time{}, 0
	}
}

// forgetHandBack drops the record, its arrivals no longer awaited.
func (t *batchTracker) forgetHandBack() {
	clear(t.back)
	t.handedBack, t.inFlight, t.came = time.Time{}, 0, false
}

// deliver filters the entry's messages as it comes (again): an index acknowledged here
// (or by the broker's ack_set, ANDed in first) is not delivered, nor after a hand-back
// one that was not handed back (the application holds it). It reports whether index i
// is delivered, and its redelivery count: once the entry was handed back, the count of
// its own hand-backs on top of the broker's when it first came; else the broker's.
func (t *batchTracker) deliver(i int, handedBack bool, count uint32) (bool, uint32) {
	if !t.outstanding(i) {
		return false, 0
	}
	if handedBack {
		if t.back[i/64]&(1<<(i%64)) == 0 {
			return false, 0
		}
		t.back[i/64] &^= 1 << (i % 64) // delivered: a second arrival in flight does not bring it again
	}
	if t.again != nil {
		// The broker's count is the entry's: every hand-back raises it for all its
		// messages, and an acknowledgement of any of them resets it.
		count = t.base + t.again[i]
	}
	return true, count
}

// handBackExpiry is how long a tracker handed back waits for its entry to come again: on
// a Shared subscription it may go to another consumer, and this one would keep it for
// ever. Forgotten, it only lets a later arrival deliver what the application holds or
// acknowledged without the broker's knowing (a duplicate, never a loss). An entry that
// came again, fewer times than handed back, keeps its tracker and loses only the record.
var handBackExpiry = 10 * time.Minute

// batchIndex is the index to track m by in its entry's nacks: its batch index, or -1
// when it is its entry's only message.
func batchIndex(id MessageID) int32 {
	if id.BatchSize <= 1 || id.BatchIndex < 0 {
		return -1
	}
	return id.BatchIndex
}

// pendingNack is an entry some of whose messages were negatively acknowledged: it is
// asked back once the latest of their delays has passed (the broker redelivers whole
// entries, and none of them may come back before its own delay).
type pendingNack struct {
	due     time.Time
	indexes []int32 // batch indexes, or -1 for an entry's only message
}

type chunkCtx struct {
	uuid      string
	total     int
	totalSize int
	size      int
	last      int
	chunks    [][]byte
	ids       []MessageID
	md        *pb.MessageMetadata
	created   time.Time
}

// partitionConsumer consumes one partition (or non-partitioned topic) of a Consumer.
type partitionConsumer struct {
	c         *Consumer
	client    *Client
	topic     string
	partition int32
	opts      ConsumerOptions
	id        uint64
	log       *slog.Logger

	earliest bool // a partition added at runtime: a new subscription starts at its earliest message

	mu sync.Mutex
	// state, reg and cn are the registration's state machine (see regState).
	state          regState
	reg            *consumerHandle
	cn             *conn.Conn // set only when ready
	readyAt        time.Time
	progressed     bool // a message arrived since the registration became ready
	attempts       int  // failed attempts since the last stable registration
	permitsTaken   int  // permits the application (or a discard) freed since the last FLOW
	permitsGranted int
	// With ReceiverQueueBytes: the bytes of this partition's messages queued and not yet
	// taken, the permits granted and not yet used by an arrival, and the most bytes an
	// arrival brought per permit lately (a decaying maximum, 0 until the first one; see
	// permitBytesLocked).
	heldBytes      int
	inFlight       int
	bytesPerPermit int
	gen            uint64 // the registration's generation: a message of an older one frees nothing
	// With a MemoryLimiter: the bytes reserved from it for the permits in flight, and
	// when they were last reserved or an arrival used some (see releaseIdleLocked).
	reserved         int
	reservedAt       time.Time
	chunks           map[string]*chunkCtx
	chunkBytes       int // payload bytes held by chunks, bounded by MaxChunkedMessageSize (and charged to the MemoryLimiter)
	chunkOrder       []string
	midChunk         bool // the last entry that landed was a non-final chunk
	trackers         map[entryKey]*batchTracker
	acks             map[entryKey]*pb.MessageIdData // grouped individual acks
	nacks            map[entryKey]*pendingNack
	expiredAt        time.Time // the last look for trackers handed back long ago
	ended            bool
	closing          bool
	reconnects       int
	discarded        int
	checksumFailures int
	malformed        int
	chunkedDropped   int // incomplete chunked messages dropped (their chunks acknowledged)
	undecodable      [numReasons]int
	undecodableLog   reasonLog
	halted           bool // an encrypted message stopped the partition (CryptoFail)

	reconnectCh chan struct{}
	done        chan struct{}
	wg          sync.WaitGroup
}

func newPartitionConsumer(c *Consumer, topic string, partition int32) *partitionConsumer {
	return &partitionConsumer{
		c: c, client: c.client, topic: topic, partition: partition, opts: c.opts,
		id:          c.client.consumerID.Add(1),
		log:         c.client.log.With("topic", topic, "subscription", c.opts.Subscription),
		chunks:      map[string]*chunkCtx{},
		trackers:    map[entryKey]*batchTracker{},
		acks:        map[entryKey]*pb.MessageIdData{},
		nacks:       map[entryKey]*pendingNack{},
		reconnectCh: make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
}

func (p *partitionConsumer) start(ctx context.Context) error {
	// A connection that closed right after the broker accepted us is a race, and a
	// broker whose metadata is moving refuses for moments: both are tried again, not
	// reported as the creation's failure.
	if err := creationRetry(ctx, p.c.client.closing, p.c.opts.Backoff, func() error { return p.connect(ctx, true) }); err != nil {
		return err
	}
	p.wg.Add(1)
	go p.run()
	return nil
}

// consumerHandle routes one registration's frames to the partition consumer; see
// handle (the producer's) for why every attempt has its own.
type consumerHandle struct {
	p    *partitionConsumer
	cn   *conn.Conn
	lost error // set (under p.mu) when the connection closed while subscribing
}

func (h *consumerHandle) HandleMessage(cmd *pb.CommandMessage, f *frame.Frame, frameErr error) {
	h.p.message(h, cmd, f, frameErr)
}
func (h *consumerHandle) HandleEndOfTopic() { h.p.endOfTopic() }
func (h *consumerHandle) HandleActiveChange(active bool) {
	if f := h.p.opts.OnActiveChange; f != nil {
		topic := h.p.topic
		h.p.c.events.push(completion{cb: func(MessageID, error) { f(topic, active) }})
	}
}
func (h *consumerHandle) HandleClose(reason error) { h.p.connectionLost(h, reason) }

// detachLocked forgets h as the current registration and unregisters it from its connection.
func (p *partitionConsumer) detachLocked(h *consumerHandle) {
	if p.reg != h {
		return
	}
	p.reg = nil
	p.cn = nil
	h.cn.RemoveConsumer(p.id)
}

func (p *partitionConsumer) connect(ctx context.Context, first bool) error {
	ctx, cancel := context.WithTimeout(ctx, p.client.opts.OperationTimeout)
	defer cancel()
	bc, err := p.client.lookup(ctx, p.topic)
	if err != nil {
		return err
	}
	cn, err := p.client.pool.Get(ctx, bc.logical, bc.physical, bc.proxied)
	if err != nil {
		return err
	}
	h := &consumerHandle{p: p, cn: cn}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return ErrConsumerClosed
	}
	if err := cn.AddConsumer(p.id, h); err != nil {
		p.mu.Unlock()
		return err
	}
	p.reg, p.state = h, stateRegistering
	p.mu.Unlock()
	reqID := p.client.nextRequestID()
	sub := &pb.CommandSubscribe{
		Topic:           proto.String(p.topic),
		Subscription:    proto.String(p.opts.Subscription),
		SubType:         p.opts.Type.pb().Enum(),
		ConsumerId:      proto.Uint64(p.id),
		RequestId:       proto.Uint64(reqID),
		InitialPosition: pb.CommandSubscribe_Latest.Enum(),
		Durable:         proto.Bool(true),
	}
	if p.opts.InitialPosition == Earliest || p.earliest {
		sub.InitialPosition = pb.CommandSubscribe_Earliest.Enum()
	}
	if p.opts.Name != "" {
		sub.ConsumerName = proto.String(p.opts.Name)
	}
	if p.opts.Type == KeyShared {
		sub.KeySharedMeta = &pb.KeySharedMeta{KeySharedMode: pb.KeySharedMode_AUTO_SPLIT.Enum()}
	}
	_, err = cn.Request(ctx, reqID, &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: sub})
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && h.lost != nil {
		// Subscribed, but the connection closed before we could record it: a failed
		// attempt, retried on a new connection.
		err = fmt.Errorf("%w: %w", errLostWhileRegistering, h.lost)
	}
	if err == nil && p.reg != h {
		err = errLostWhileRegistering
	}
	if err != nil {
		p.detachLocked(h)
		if p.closing {
			return ErrConsumerClosed
		}
		if p.state == stateRegistering {
			p.state = stateReconnecting
		}
		return fmt.Errorf("pulsar: subscribing %q to %s: %w", p.opts.Subscription, p.topic, err)
	}
	if p.closing {
		p.detachLocked(h)
		return ErrConsumerClosed
	}
	p.cn = cn
	p.state = stateReady
	if !first {
		// Counted in the step that makes the consumer ready: its messages can reach
		// the application before reconnect() would take the lock again.
		p.reconnects++
	}
	p.readyAt = time.Now()
	p.progressed = false
	p.permitsTaken = 0
	p.gen++
	// What was acknowledged while the registration was lost goes first, so the broker
	// does not redeliver it on the permits below.
	p.flushAcksLocked()
	// A fresh subscription: the whole window is open again (in bytes: as much of it as
	// the byte bound and the limiter allow; the queue of the last one was emptied on its
	// loss, and the permits in flight there are void).
	if p.byteMode() {
		p.unreserveLocked()
		p.heldBytes, p.inFlight, p.permitsTaken = 0, 0, p.opts.ReceiverQueueSize
		p.grantLocked()
	} else {
		p.flowLocked(p.opts.ReceiverQueueSize)
	}
	return nil
}

func (p *partitionConsumer) flowLocked(n int) {
	// The broker reads message_permits as a Java int and refuses (closing the
	// connection) anything above 2^31-1: a large return (a discarded hostile batch
	// claims up to that many) goes in several FLOWs.
	for n > 0 && p.cn != nil {
		k := min(n, math.MaxInt32)
		if p.cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{
			ConsumerId: proto.Uint64(p.id), MessagePermits: proto.Uint32(uint32(k))}}) != nil {
			return
		}
		p.permitsGranted += k
		n -= k
	}
}

// taken is called when the application takes m: its permits return to the broker once
// half the window is free (and, with ReceiverQueueBytes, as the byte bound allows).
func (p *partitionConsumer) taken(m *Message) {
	p.mu.Lock()
	if m.gen == p.gen {
		p.heldBytes = max(0, p.heldBytes-m.size)
	}
	p.returnPermitsLocked(m.permits)
	p.mu.Unlock()
}

func (p *partitionConsumer) returnPermitsLocked(n int) {
	p.permitsTaken += n
	if p.byteMode() {
		p.grantLocked()
		return
	}
	if p.permitsTaken >= max(1, p.opts.ReceiverQueueSize/2) {
		p.flowLocked(p.permitsTaken)
		p.permitsTaken = 0
	}
}

// byteMode: permits are granted by grantLocked, in bytes (ReceiverQueueBytes and/or a
// MemoryLimiter), rather than in halves of the window.
func (p *partitionConsumer) byteMode() bool {
	return p.opts.ReceiverQueueBytes > 0 || p.opts.MemoryLimiter != nil
}

// minPermitBytes is the least a permit is assumed to bring: a permit in flight may bring
// an entry of any size (the broker sends whatever is next), so however small the entries
// so far, no more than ReceiverQueueBytes/minPermitBytes permits are out at once, and a
// backlog that goes from small entries to ones of up to this size cannot multiply the
// window by the jump.
const minPermitBytes = 8 << 10

// permitBytesLocked is the bytes a permit in flight is assumed to bring: the largest an
// arrival brought per permit lately (it rises at once, and falls by an eighth of the gap
// per smaller arrival), never less than minPermitBytes; 0 until the first arrival.
func (p *partitionConsumer) permitBytesLocked() int {
	if p.bytesPerPermit == 0 {
		return 0
	}
	return max(p.bytesPerPermit, minPermitBytes)
}

// grantLocked sends the broker as many of the withheld permits as the byte bound has
// room for: the bytes queued, plus the permits in flight at the bytes an arrival may
// bring per permit (permitBytesLocked), stay within ReceiverQueueBytes; with a MemoryLimiter, the permits granted
// are also reserved from it at that estimate (as many as it can cover). With nothing
// queued and nothing in flight one permit always goes (charged to the limiter even
// beyond its limit), so a message larger than the bound is still delivered and the flow
// never stalls; until the first arrival tells the size, one permit goes at a time.
//
// inFlight is the broker's count of permits: it goes below zero when a batch brought
// more messages than there were permits left (the broker sends whole entries), and the
// broker takes that debt out of the next permits, so they are granted on top.
func (p *partitionConsumer) grantLocked() {
	if p.permitsTaken <= 0 || p.cn == nil {
		return
	}
	bound := p.opts.ReceiverQueueBytes
	if bound <= 0 {
		bound = math.MaxInt
	}
	out, debt := max(p.inFlight, 0), max(-p.inFlight, 0)
	k := 0
	per := p.permitBytesLocked()
	if per > 0 {
		// The permits in flight count at the current estimate, or at what was reserved
		// for them when an earlier (larger) estimate granted them.
		if room := bound - p.heldBytes - max(out*per, p.reserved); room > 0 {
			k = room / per
		}
	}
	idle := p.heldBytes == 0 && out == 0
	k = min(k, p.permitsTaken-debt)
	if !idle && per > 0 {
		// Not a FLOW per message taken: permits go once half the window (in bytes, or
		// in messages) is free, as they do without a byte bound.
		if k < max(1, min(p.opts.ReceiverQueueSize/2, bound/2/per)) {
			return
		}
	}
	if lim := p.opts.MemoryLimiter; lim != nil && k > 0 {
		// As many as the shared budget can cover now: halve until they fit, then add
		// one at a time while they still do.
		unit, want := max(per, 1), k
		for k > 0 && !lim.TryReserve(int64(k)*int64(unit)) {
			k /= 2
		}
		for k > 0 && k < want && lim.TryReserve(int64(unit)) {
			k++
		}
		p.reserved += k * unit
		p.reservedAt = time.Now()
	}
	if k < 1 && idle {
		// Beyond the limiter only for a partition reassembling at most one chunked
		// message: its chunks' permits go back as they arrive, so a message larger than
		// the budget still completes. One reassembling more gets its permit only as far
		// as the limiter covers it, and waits for room otherwise (see chargeChunkLocked).
		// While the application holds a message taken with KeepMemoryCharge
		// (Consumer.Settled), only in the middle of one chunked message (the last entry
		// to land was its non-final chunk): between messages, what each such permit
		// brought would be taken and held, the partition idle again, without bound (a
		// chunked message whose producer died keeps len(p.chunks) at 1 for ChunkExpiry).
		// Otherwise one permit as far as the limiter covers it: at the estimate, or at
		// the smallest one when that does not fit (one large message raised the
		// estimate, and only arrivals bring it down: none would come).
		unit := max(per, 1)
		res := unit
		holding := p.c.holding()
		switch lim := p.opts.MemoryLimiter; {
		case lim == nil:
			k = 1
		case len(p.chunks) == 1 && (!holding || p.midChunk) || len(p.chunks) == 0 && !holding:
			lim.Charge(int64(unit))
			k = 1
		case lim.TryReserve(int64(unit)):
			k = 1
		case len(p.chunks) == 0 && lim.TryReserve(int64(min(unit, minPermitBytes))):
			res, k = min(unit, minPermitBytes), 1
		}
		if k == 1 && p.opts.MemoryLimiter != nil {
			p.reserved += res
			p.reservedAt = time.Now()
		}
	}
	if k < 1 {
		return // granted again as the application takes messages
	}
	g := min(k+debt, p.permitsTaken)
	p.flowLocked(g)
	p.permitsTaken -= g
	p.inFlight += g
}

// starvedLocked: the partition holds nothing, has no permits in flight and withholds
// some, so only a grant can bring it anything.
func (p *partitionConsumer) starvedLocked() bool {
	return p.cn != nil && p.heldBytes == 0 && p.inFlight <= 0 && p.permitsTaken > 0
}

// landedLocked accounts an entry that used n permits: beyond them, the broker's count
// goes below zero (see grantLocked). It returns the entry's share of the limiter's
// reservation for the permits in flight, which the caller gives back with
// unreserveShareLocked once the entry's messages are charged (never before: in between
// their bytes would be counted nowhere, and a grant could take that room).
func (p *partitionConsumer) landedLocked(n int) (share int) {
	if !p.byteMode() {
		return 0
	}
	p.reservedAt = time.Now()
	if out := p.inFlight; out > 0 {
		used := min(n, out)
		share = p.reserved
		if used < out {
			share = p.reserved * used / out
		}
		p.reserved -= share
	}
	p.inFlight -= n
	return share
}

// unreserveShareLocked returns to the limiter a landed entry's share of the reservation.
func (p *partitionConsumer) unreserveShareLocked(share int) {
	if lim := p.opts.MemoryLimiter; lim != nil && share > 0 {
		lim.Release(int64(share))
	}
}

// reservationIdle is how long a reservation for permits in flight is kept with nothing
// arriving on them. The broker keeps the permits (they cannot be taken back), but a quiet
// topic may never use them: held for good, the reservation kept the shared budget spent
// and every other user of it waiting. What they bring later is charged as it arrives.
var reservationIdle = time.Second

// releaseIdleLocked returns the reservation of permits in flight that brought nothing
// for reservationIdle; they stay counted in flight, so no more are granted for them.
func (p *partitionConsumer) releaseIdleLocked(now time.Time) {
	if p.reserved > 0 && now.Sub(p.reservedAt) >= reservationIdle {
		if lim := p.opts.MemoryLimiter; lim != nil {
			lim.Release(int64(p.reserved))
		}
		p.reserved = 0
	}
}

// unreserveLocked returns the whole reservation: the permits in flight are void (the
// registration was lost, or the consumer closes).
func (p *partitionConsumer) unreserveLocked() {
	if lim := p.opts.MemoryLimiter; lim != nil && p.reserved > 0 {
		lim.Release(int64(p.reserved))
	}
	p.reserved, p.inFlight = 0, 0
}

// chargeLocked charges the limiter for messages about to be queued; the Consumer
// releases the charge when the application takes them or the queue drops them.
func (p *partitionConsumer) chargeLocked(msgs ...*Message) {
	lim := p.opts.MemoryLimiter
	if lim == nil {
		return
	}
	for _, m := range msgs {
		// A whole chunked message comes with its chunks' charge already.
		switch d := m.size - m.charged; {
		case d > 0:
			lim.Charge(int64(d))
		case d < 0:
			lim.Release(int64(-d))
		}
		m.charged = m.size
	}
}

// arrivedLocked accounts an entry that brought bytes to the queue (sample: its bytes
// per permit, 0 when it tells nothing); the permits it used were accounted by
// landedLocked.
func (p *partitionConsumer) arrivedLocked(held, sample int) {
	p.heldBytes += held
	if sample > 0 {
		if sample >= p.bytesPerPermit {
			p.bytesPerPermit = sample
		} else {
			p.bytesPerPermit -= (p.bytesPerPermit - sample + 7) / 8
		}
	}
	if p.byteMode() {
		// The window fills up to the bound without waiting for the application: the
		// first arrival tells the size, and later ones may leave room the estimate allows.
		p.grantLocked()
	}
}

// discardLocked drops an entry before delivery: it is reported to the broker (when
// validation failed) and its permits are returned so the flow never stalls.
func (p *partitionConsumer) discardLocked(cn *conn.Conn, id *pb.MessageIdData, permits int, why pb.CommandAck_ValidationError, report bool) {
	p.discarded += permits
	if report && cn != nil {
		_ = cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
			ConsumerId: proto.Uint64(p.id), AckType: pb.CommandAck_Individual.Enum(),
			MessageId:       []*pb.MessageIdData{{LedgerId: id.LedgerId, EntryId: id.EntryId}},
			ValidationError: why.Enum()}})
	}
	p.returnPermitsLocked(permits)
}

// message decodes one MESSAGE frame on the connection's reader goroutine. Whatever the
// frame holds, it costs at most one discarded message: delivery.Parse validates it.
func (p *partitionConsumer) message(h *consumerHandle, cmd *pb.CommandMessage, f *frame.Frame, frameErr error) {
	p.mu.Lock()
	if p.reg != h || p.state != stateReady {
		p.mu.Unlock()
		return // from a connection we left
	}
	if p.halted {
		p.mu.Unlock()
		return // stopped by an encrypted message: nothing after it is delivered
	}
	cn := h.cn
	p.progressed = true
	id := cmd.GetMessageId()
	e, err := delivery.Parse(f.Metadata, f.Payload, cmd.GetAckSet(), p.limitsLocked())
	share := p.landedLocked(max(e.Permits, 1))
	md := e.Metadata
	base := Message{
		Topic: p.topic, ProducerName: md.GetProducerName(), RedeliveryCount: cmd.GetRedeliveryCount(),
		PublishTime: time.UnixMilli(int64(md.GetPublishTime())), pc: p,
	}
	mid := messageIDFromPB(id, p.partition)
	de := (*delivery.Error)(nil)
	if frameErr != nil || errors.As(err, &de) {
		why := pb.CommandAck_ChecksumMismatch
		if frameErr != nil {
			err = frameErr
		} else {
			why = de.Reason
		}
		ue := &UndecodableError{Topic: p.topic, ID: mid, Reason: undecodableReason(frameErr, md, why), Err: err}
		ue.ID.BatchIndex, ue.ID.BatchSize = -1, 0
		if p.opts.DeliverUndecodable {
			m := p.storedLocked(base, mid, ue, f, md, e.Permits)
			p.noteUndecodableLocked(ue, "delivered as stored")
			p.chargeLocked(m)
			p.unreserveShareLocked(share)
			p.arrivedLocked(m.size, max(m.size/m.permits, 1))
			p.mu.Unlock()
			p.c.enqueue([]*Message{m})
			return
		}
		p.noteUndecodableLocked(ue, "acknowledged with a validation error")
		if frameErr != nil {
			p.checksumFailures++
		} else {
			p.malformed++
		}
		p.unreserveShareLocked(share)
		p.discardLocked(cn, id, e.Permits, why, true)
		p.mu.Unlock()
		return
	}
	p.midChunk = false
	switch e.Kind {
	case delivery.Encrypted:
		ue := &UndecodableError{Topic: p.topic, ID: mid, Reason: ReasonEncrypted}
		ue.ID.BatchIndex, ue.ID.BatchSize = -1, 0
		switch p.opts.CryptoFailureAction {
		case CryptoConsume:
			m := p.storedLocked(base, mid, nil, f, md, e.Permits)
			p.noteUndecodableLocked(ue, "delivered encrypted")
			p.chargeLocked(m)
			p.unreserveShareLocked(share)
			p.arrivedLocked(m.size, max(m.size/m.permits, 1))
			p.mu.Unlock()
			p.c.enqueue([]*Message{m})
		case CryptoDiscard:
			p.noteUndecodableLocked(ue, "acknowledged with a validation error")
			p.unreserveShareLocked(share)
			p.discardLocked(cn, id, e.Permits, pb.CommandAck_DecryptionError, true)
			p.mu.Unlock()
		default:
			// Neither delivered nor acknowledged: it stays on the broker, and so does
			// everything after it (this registration takes no more; Close hands them back).
			p.noteUndecodableLocked(ue, "stopped the partition")
			p.unreserveShareLocked(share)
			p.halted = true
			p.mu.Unlock()
			p.c.partitionFailed(ue)
		}
	case delivery.Chunk:
		p.midChunk = true
		msg := p.chunkLocked(cn, id, mid, &e, base)
		p.midChunk = msg == nil && len(p.chunks) == 1
		if msg != nil {
			msg.gen = p.gen
			p.chargeLocked(msg)
		}
		p.unreserveShareLocked(share)
		if msg != nil {
			p.arrivedLocked(msg.size, 0)
		}
		p.arrivedLocked(0, len(f.Payload))
		p.mu.Unlock()
		if msg != nil {
			p.c.enqueue([]*Message{msg})
		}
	case delivery.Single:
		m := base
		m.ID = mid
		m.ID.BatchIndex = -1
		setFromMetadata(&m, md)
		m.payload, m.size, m.permits = e.Payload, len(e.Payload), 1
		m.gen = p.gen
		p.chargeLocked(&m)
		p.unreserveShareLocked(share)
		p.arrivedLocked(m.size, max(m.size, 1))
		p.mu.Unlock()
		p.c.enqueue([]*Message{&m})
	default:
		msgs, filtered := p.unbatchLocked(mid, &e, cmd.GetAckSet(), base)
		held := 0
		for _, m := range msgs {
			m.gen = p.gen
			held += m.size
		}
		p.chargeLocked(msgs...)
		p.unreserveShareLocked(share)
		p.arrivedLocked(held, max(held/max(e.Permits, 1), 1))
		if e.Skipped > 0 {
			p.discardLocked(nil, id, e.Skipped, 0, false)
		}
		if filtered > 0 {
			p.returnPermitsLocked(filtered)
		}
		p.mu.Unlock()
		p.c.enqueue(msgs)
	}
}

// storedLocked makes the message of an entry delivered as stored, not decoded: its
// payload is the entry's (f.Payload), its permits what the broker charged for the entry.
func (p *partitionConsumer) storedLocked(base Message, mid MessageID, ue *UndecodableError, f *frame.Frame, md *pb.MessageMetadata, permits int) *Message {
	m := base
	m.ID = mid
	m.ID.BatchIndex, m.ID.BatchSize = -1, 0 // the entry as a whole
	if md != nil {
		setFromMetadata(&m, md)
	}
	m.Undecodable, m.Stored = ue, storedEntry(f.Metadata, md)
	m.payload, m.size, m.permits = f.Payload, len(f.Payload), max(permits, 1)
	m.gen = p.gen
	return &m
}

// noteUndecodableLocked counts an entry that could not be decoded and logs it (at a
// bounded rate: see reasonLog).
func (p *partitionConsumer) noteUndecodableLocked(ue *UndecodableError, action string) {
	p.undecodable[ue.Reason]++
	p.undecodableLog.note(p.log, time.Now(), ue, action)
}

// limitsLocked bounds what one delivery may make this consumer allocate.
func (p *partitionConsumer) limitsLocked() delivery.Limits {
	return delivery.Limits{MaxMessageSize: p.cn.MaxMessageSize(), MaxChunkedMessageSize: p.opts.MaxChunkedMessageSize}
}

func setFromMetadata(m *Message, md *pb.MessageMetadata) {
	m.Key = md.GetPartitionKey()
	m.OrderingKey = md.GetOrderingKey()
	if t := md.GetEventTime(); t > 0 {
		m.EventTime = time.UnixMilli(int64(t))
	}
	if len(md.GetProperties()) > 0 {
		m.Properties = make(map[string]string, len(md.GetProperties()))
		for _, kv := range md.GetProperties() {
			m.Properties[kv.GetKey()] = kv.GetValue()
		}
	}
}

// unbatchLocked turns a validated batch into messages and tracks its acknowledgement.
// An entry that comes again while its tracker is kept (see batchTracker) brings only
// what the tracker lets through; filtered counts the rest, whose permits the caller
// returns (once the arrival is accounted).
func (p *partitionConsumer) unbatchLocked(mid MessageID, e *delivery.Entry, ackSet []int64, base Message) (msgs []*Message, filtered int) {
	n := e.BatchSize
	key := entryKey{uint64(mid.LedgerID), uint64(mid.EntryID)}
	t := p.trackers[key]
	handedBack := false
	if t != nil {
		if len(ackSet) > 0 {
			for i := range t.bits {
				if i < len(ackSet) {
					t.bits[i] &= ackSet[i]
				} else {
					t.bits[i] = 0
				}
			}
		}
		handedBack = !t.handedBack.IsZero()
	} else if n > 1 {
		t = newBatchTracker(n, ackSet)
		t.base = base.RedeliveryCount
		p.trackers[key] = t
	}
	msgs = make([]*Message, 0, len(e.Messages))
	for _, bm := range e.Messages {
		smd := bm.Metadata
		m := base
		if t != nil {
			ok, count := t.deliver(bm.Index, handedBack, base.RedeliveryCount)
			if !ok {
				filtered++
				continue
			}
			m.RedeliveryCount = count
		}
		m.ID = mid
		m.ID.BatchIndex, m.ID.BatchSize = int32(bm.Index), int32(n)
		m.Key = smd.GetPartitionKey()
		m.OrderingKey = smd.GetOrderingKey()
		if t := smd.GetEventTime(); t > 0 {
			m.EventTime = time.UnixMilli(int64(t))
		}
		if len(smd.GetProperties()) > 0 {
			m.Properties = make(map[string]string, len(smd.GetProperties()))
			for _, kv := range smd.GetProperties() {
				m.Properties[kv.GetKey()] = kv.GetValue()
			}
		}
		m.payload, m.size, m.permits = bm.Payload, len(bm.Payload), 1
		msgs = append(msgs, &m)
	}
	if t != nil {
		if handedBack {
			t.arrived()
		}
		if t.done() {
			delete(p.trackers, key) // acknowledged whole meanwhile (by the broker's ack_set)
		}
	}
	return msgs, filtered
}

// chunkLocked adds one chunk; it returns the message when the chunk completes it.
func (p *partitionConsumer) chunkLocked(cn *conn.Conn, id *pb.MessageIdData, mid MessageID, e *delivery.Entry, base Message) *Message {
	md, payload := e.Metadata, e.Payload
	uuid, chunkID, total := e.Chunk.UUID, e.Chunk.ID, e.Chunk.Count
	ctx := p.chunks[uuid]
	if chunkID == 0 {
		if ctx != nil {
			p.dropChunksLocked(uuid, "its first chunk came again")
		}
		for len(p.chunks) >= p.opts.MaxPendingChunkedMessages && len(p.chunkOrder) > 0 {
			p.dropChunksLocked(p.chunkOrder[0], "too many chunked messages pending")
		}
		// Reassembly is bounded in bytes too: older incomplete messages make room.
		for p.chunkBytes+e.Chunk.TotalSize > p.opts.MaxChunkedMessageSize && len(p.chunkOrder) > 0 {
			p.dropChunksLocked(p.chunkOrder[0], "reassembly bytes exhausted")
		}
		ctx = &chunkCtx{uuid: uuid, total: total, totalSize: e.Chunk.TotalSize, last: -1, md: md, created: time.Now()}
		p.chunks[uuid] = ctx
		p.chunkOrder = append(p.chunkOrder, uuid)
	}
	// A chunk that can never be part of a whole message is acknowledged, so it leaves no
	// backlog for ever (the Java client acknowledges expired chunks likewise).
	switch {
	case ctx == nil:
		p.log.Debug("discarding a chunk of a message whose first chunk is missing", "uuid", uuid, "chunk", chunkID)
		p.ackDroppedLocked(mid)
		p.discardLocked(nil, id, 1, 0, false)
		return nil
	case chunkID <= ctx.last:
		p.ackDroppedLocked(mid) // a duplicate entry (a producer's resend): the context goes on
		p.discardLocked(nil, id, 1, 0, false)
		return nil
	case chunkID != ctx.last+1 || total != ctx.total || e.Chunk.TotalSize != ctx.totalSize || ctx.size+len(payload) > ctx.totalSize:
		p.dropChunksLocked(uuid, fmt.Sprintf("chunk %d after chunk %d", chunkID, ctx.last))
		p.ackDroppedLocked(mid)
		p.discardLocked(nil, id, 1, 0, false)
		return nil
	}
	ctx.last = chunkID
	ctx.chunks = append(ctx.chunks, payload)
	ctx.ids = append(ctx.ids, mid)
	ctx.size += len(payload)
	p.chunkBytes += len(payload)
	p.chargeChunkLocked(len(payload))
	if chunkID < total-1 {
		// Its permit goes back now, not when the whole message is taken: a message of
		// more chunks than the receiver window must still complete. Reassembly is
		// bounded by MaxPendingChunkedMessages and MaxChunkedMessageSize bytes instead.
		p.returnPermitsLocked(1)
		return nil
	}
	p.removeChunkCtxLocked(uuid, false) // the chunks' charge becomes the message's
	m := base
	m.ID = mid
	m.ID.BatchIndex = -1
	setFromMetadata(&m, md)
	m.chunkID = ctx.ids
	m.permits = 1 // the last chunk's; the others' went back on arrival
	if md.GetCompression() != pb.CompressionType_NONE {
		joined := make([]byte, 0, ctx.size)
		for _, c := range ctx.chunks {
			joined = append(joined, c...)
		}
		out, err := delivery.Decompress(md, joined, p.limitsLocked())
		if err != nil && p.opts.DeliverUndecodable {
			// Handed up as stored, as a single entry that does not decompress is: the
			// compressed bytes of all its chunks, with the last chunk's metadata, still
			// charged; acknowledging it acknowledges every chunk.
			ue := &UndecodableError{Topic: p.topic, ID: mid, Reason: ReasonDecompression, Err: err}
			p.noteUndecodableLocked(ue, "delivered as stored")
			raw, _ := proto.Marshal(md)
			m.Undecodable, m.Stored = ue, storedEntry(raw, md)
			m.payload, m.size = joined, len(joined)
			m.charged = p.chargedChunks(ctx)
			return &m
		}
		if err != nil {
			p.releaseLocked(ctx.size)
			p.noteUndecodableLocked(&UndecodableError{Topic: p.topic, ID: mid, Reason: ReasonDecompression, Err: err},
				"acknowledged with a validation error, every chunk")
			for i, cid := range ctx.ids {
				permits := 0
				if i == len(ctx.ids)-1 {
					permits = 1 // the other chunks' permits went back on arrival
				}
				p.discardLocked(cn, &pb.MessageIdData{LedgerId: proto.Uint64(uint64(cid.LedgerID)), EntryId: proto.Uint64(uint64(cid.EntryID))}, permits, pb.CommandAck_DecompressionError, true)
			}
			return nil
		}
		m.payload, m.size = out, len(out)
		m.charged = p.chargedChunks(ctx) // chargeLocked adjusts it to the decompressed size
		return &m
	}
	m.chunks, m.size = ctx.chunks, ctx.size
	m.charged = p.chargedChunks(ctx)
	if len(m.chunks) == 1 {
		m.payload, m.chunks = m.chunks[0], nil
	}
	return &m
}

// chargeChunkLocked charges a chunk held for reassembly to the MemoryLimiter. Its
// permit goes back at once and the partition holds nothing queued; were it idle for
// grantLocked, its next permit would be granted beyond a spent budget again and again,
// and chunks of messages whose last chunks never come would pile up to
// MaxPendingChunkedMessages and MaxChunkedMessageSize. Only a partition reassembling one
// message counts as idle (so a message larger than the budget still completes, held
// beyond it alone); one reassembling more gets permits only as far as the budget covers
// them, and waits for room otherwise (the run loop grants again as it frees). Nothing is
// dropped for a budget spent for a moment: a chunked message is whole on the broker,
// and dropping it acknowledged its chunks, losing it to the subscription for good. What
// never completes goes at ChunkExpiry (or MaxPendingChunkedMessages), which also ends a
// wait for room that only the partition's own reassembly could make.
func (p *partitionConsumer) chargeChunkLocked(n int) {
	if lim := p.opts.MemoryLimiter; lim != nil {
		lim.Charge(int64(n))
	}
}

// removeChunkCtxLocked forgets a chunked message being reassembled; release: its
// chunks' charge goes back to the MemoryLimiter (else the caller takes it over).
func (p *partitionConsumer) removeChunkCtxLocked(uuid string, release bool) {
	if ctx := p.chunks[uuid]; ctx != nil {
		p.chunkBytes -= ctx.size
		if release {
			p.releaseLocked(ctx.size)
		}
	}
	delete(p.chunks, uuid)
	for i, u := range p.chunkOrder {
		if u == uuid {
			p.chunkOrder = append(p.chunkOrder[:i], p.chunkOrder[i+1:]...)
			break
		}
	}
}

func (p *partitionConsumer) dropChunksLocked(uuid, why string) {
	ctx := p.chunks[uuid]
	if ctx == nil {
		return
	}
	p.removeChunkCtxLocked(uuid, true)
	p.chunkedDropped++
	p.log.Warn("dropping an incomplete chunked message; its chunks are acknowledged", "uuid", uuid, "chunks", len(ctx.ids), "of", ctx.total, "why", why)
	// Their permits went back on arrival; acknowledging them keeps them from staying in
	// the backlog for ever (the message is lost to this subscription either way).
	for _, id := range ctx.ids {
		p.ackDroppedLocked(id)
	}
	p.discarded += len(ctx.ids)
}

// chargedChunks is what a whole chunked message's chunks were charged to the limiter.
func (p *partitionConsumer) chargedChunks(ctx *chunkCtx) int {
	if p.opts.MemoryLimiter == nil {
		return 0
	}
	return ctx.size
}

// releaseLocked returns n bytes to the MemoryLimiter, if any.
func (p *partitionConsumer) releaseLocked(n int) {
	if lim := p.opts.MemoryLimiter; lim != nil && n > 0 {
		lim.Release(int64(n))
	}
}

// dropAllChunksLocked forgets every message being reassembled and returns their
// charge: they come again on the next subscription, or the consumer is done.
func (p *partitionConsumer) dropAllChunksLocked() {
	p.releaseLocked(p.chunkBytes)
	p.chunks, p.chunkOrder, p.chunkBytes = map[string]*chunkCtx{}, nil, 0
}

// ackDroppedLocked acknowledges a chunk entry that was dropped (grouped with the others).
func (p *partitionConsumer) ackDroppedLocked(id MessageID) {
	key := entryKey{uint64(id.LedgerID), uint64(id.EntryID)}
	p.acks[key] = &pb.MessageIdData{LedgerId: proto.Uint64(key.ledger), EntryId: proto.Uint64(key.entry)}
}

func (p *partitionConsumer) endOfTopic() {
	p.mu.Lock()
	already := p.ended
	p.ended = true
	p.mu.Unlock()
	if !already {
		p.c.partitionEnded()
	}
}

// ackIDsLocked turns m into the entries to acknowledge, updating batch trackers. It
// returns nothing when m is part of a batch that is not wholly acknowledged yet and
// batch-index acknowledgements are off.
func (p *partitionConsumer) ackIDsLocked(m *Message) []*pb.MessageIdData {
	if len(m.chunkID) > 0 {
		ids := make([]*pb.MessageIdData, 0, len(m.chunkID))
		for _, c := range m.chunkID {
			ids = append(ids, &pb.MessageIdData{LedgerId: proto.Uint64(uint64(c.LedgerID)), EntryId: proto.Uint64(uint64(c.EntryID))})
		}
		return ids
	}
	id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(m.ID.LedgerID)), EntryId: proto.Uint64(uint64(m.ID.EntryID))}
	if m.ID.BatchSize <= 1 || m.ID.BatchIndex < 0 {
		return []*pb.MessageIdData{id}
	}
	key := entryKey{uint64(m.ID.LedgerID), uint64(m.ID.EntryID)}
	t := p.trackers[key]
	if t == nil {
		// The entry was handed back to the broker since this message was delivered (a
		// reconnect, or a redelivery on a shared subscription whose tracker expired):
		// it comes again, perhaps to another consumer, so no tracker is kept for it.
		// With batch-index acks this index alone is acknowledged; without, it is not.
		if !p.opts.BatchIndexAck {
			return nil
		}
		one := newBatchTracker(int(m.ID.BatchSize), nil)
		one.clear(int(m.ID.BatchIndex))
		id.AckSet, id.BatchSize = one.bits, proto.Int32(int32(one.size))
		return []*pb.MessageIdData{id}
	}
	t.clear(int(m.ID.BatchIndex))
	if t.done() {
		delete(p.trackers, key)
		return []*pb.MessageIdData{id}
	}
	if !p.opts.BatchIndexAck {
		return nil
	}
	id.AckSet = append([]int64(nil), t.bits...)
	id.BatchSize = proto.Int32(int32(t.size))
	return []*pb.MessageIdData{id}
}

func (p *partitionConsumer) ack(m *Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return ErrConsumerClosed
	}
	p.unnackLocked(m)
	for _, id := range p.ackIDsLocked(m) {
		key := entryKey{id.GetLedgerId(), id.GetEntryId()}
		p.acks[key] = id // a later, fuller ack_set of the same entry replaces the earlier one
	}
	if len(p.acks) >= p.opts.AckGroupMax {
		p.flushAcksLocked()
	}
	return nil
}

func (p *partitionConsumer) flushAcksLocked() {
	if len(p.acks) == 0 || p.cn == nil {
		return
	}
	ids := make([]*pb.MessageIdData, 0, len(p.acks))
	for k, id := range p.acks {
		ids = append(ids, id)
		delete(p.acks, k)
	}
	_ = p.cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(p.id), AckType: pb.CommandAck_Individual.Enum(), MessageId: ids}})
}

func (p *partitionConsumer) ackSync(ctx context.Context, m *Message) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return ErrConsumerClosed
	}
	p.unnackLocked(m)
	ids := p.ackIDsLocked(m)
	for _, id := range ids {
		delete(p.acks, entryKey{id.GetLedgerId(), id.GetEntryId()})
	}
	cn := p.cn
	p.mu.Unlock()
	if len(ids) == 0 {
		// Without batch-index acks the broker only learns of a batch when all of it is
		// acknowledged, so this acknowledgement is not durable yet: say so.
		return fmt.Errorf("%w: message %s on %s", ErrAckDeferred, m.ID, p.topic)
	}
	return p.sendAck(ctx, cn, pb.CommandAck_Individual, ids)
}

func (p *partitionConsumer) sendAck(ctx context.Context, cn *conn.Conn, typ pb.CommandAck_AckType, ids []*pb.MessageIdData) error {
	if cn == nil {
		return fmt.Errorf("%w: not connected to the broker for %s; retry", ErrConnectionClosed, p.topic)
	}
	reqID := p.client.nextRequestID()
	resp, err := cn.Request(ctx, reqID, &pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(p.id), AckType: typ.Enum(), MessageId: ids, RequestId: proto.Uint64(reqID)}})
	if err != nil {
		return fmt.Errorf("pulsar: acknowledging on %s: %w", p.topic, err)
	}
	if ar := resp.GetAckResponse(); ar != nil && ar.Error != nil {
		return fmt.Errorf("pulsar: acknowledging on %s: %w", p.topic, &ServerError{Code: ServerErrorCode(ar.GetError()), Message: ar.GetMessage()})
	}
	return nil
}

func (p *partitionConsumer) ackCumulative(ctx context.Context, m *Message) error {
	p.mu.Lock()
	p.forgetCoveredLocked(m)
	p.mu.Unlock()
	id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(m.ID.LedgerID)), EntryId: proto.Uint64(uint64(m.ID.EntryID))}
	if last := len(m.chunkID); last > 0 {
		c := m.chunkID[last-1]
		id = &pb.MessageIdData{LedgerId: proto.Uint64(uint64(c.LedgerID)), EntryId: proto.Uint64(uint64(c.EntryID))}
	} else if m.ID.BatchSize > 1 && int(m.ID.BatchIndex) < int(m.ID.BatchSize)-1 {
		if p.opts.BatchIndexAck {
			t := newBatchTracker(int(m.ID.BatchSize), nil)
			for i := 0; i <= int(m.ID.BatchIndex); i++ {
				t.clear(i)
			}
			id.AckSet, id.BatchSize = t.bits, proto.Int32(int32(t.size))
		} else if m.ID.EntryID > 0 {
			id.EntryId = proto.Uint64(uint64(m.ID.EntryID - 1)) // up to the previous entry; this batch is not complete
		} else {
			return nil
		}
	}
	p.mu.Lock()
	cn := p.cn
	p.mu.Unlock()
	return p.sendAck(ctx, cn, pb.CommandAck_Cumulative, []*pb.MessageIdData{id})
}

// forgetCoveredLocked forgets the batch trackers (with their hand-back records) and
// the pending nacks that a cumulative acknowledgement of m settles: those of every entry
// before m's (ledger, then entry, as the broker orders them), and of m's own entry the
// indexes up to m's (all of it when m ends its batch or is no batch). An entry's tracker
// goes once none of its indexes is outstanding.
func (p *partitionConsumer) forgetCoveredLocked(m *Message) {
	last := m.ID
	if n := len(m.chunkID); n > 0 {
		last = m.chunkID[n-1]
	}
	through := entryKey{uint64(last.LedgerID), uint64(last.EntryID)}
	whole := len(m.chunkID) > 0 || m.ID.BatchSize <= 1 || m.ID.BatchIndex < 0 || m.ID.BatchIndex >= m.ID.BatchSize-1
	before := func(k entryKey) bool {
		return k.ledger < through.ledger || k.ledger == through.ledger && k.entry < through.entry
	}
	for k, t := range p.trackers {
		if before(k) || k == through && whole {
			delete(p.trackers, k)
		} else if k == through {
			for i := 0; i <= int(m.ID.BatchIndex); i++ {
				t.clear(i)
				if t.back != nil && i < t.size {
					t.back[i/64] &^= 1 << (i % 64)
				}
			}
			if t.done() {
				delete(p.trackers, k)
			}
		}
	}
	for k, n := range p.nacks {
		if before(k) || k == through && whole {
			delete(p.nacks, k)
		} else if k == through {
			kept := n.indexes[:0]
			for _, x := range n.indexes {
				if x > m.ID.BatchIndex {
					kept = append(kept, x)
				}
			}
			n.indexes = kept
			if len(kept) == 0 {
				delete(p.nacks, k)
			}
		}
	}
}

func (p *partitionConsumer) nack(m *Message, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	due := time.Now().Add(delay)
	ids := []MessageID{m.ID}
	if len(m.chunkID) > 0 {
		ids = m.chunkID
	}
	for _, id := range ids {
		key := entryKey{uint64(id.LedgerID), uint64(id.EntryID)}
		n := p.nacks[key]
		if n == nil {
			n = &pendingNack{due: due}
			p.nacks[key] = n
		}
		n.due = later(n.due, due)
		i := batchIndex(id)
		if !containsIndex(n.indexes, i) {
			n.indexes = append(n.indexes, i)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func containsIndex(s []int32, i int32) bool {
	for _, x := range s {
		if x == i {
			return true
		}
	}
	return false
}

// unnackLocked forgets a nack of m, acknowledged now: a nack of one of its batch-mates
// still stands (and its entry still goes back for it).
func (p *partitionConsumer) unnackLocked(m *Message) {
	ids := []MessageID{m.ID}
	if len(m.chunkID) > 0 {
		ids = m.chunkID
	}
	for _, id := range ids {
		key := entryKey{uint64(id.LedgerID), uint64(id.EntryID)}
		n := p.nacks[key]
		if n == nil {
			continue
		}
		i := batchIndex(id)
		kept := n.indexes[:0]
		for _, x := range n.indexes {
			if x != i {
				kept = append(kept, x)
			}
		}
		n.indexes = kept
		if len(kept) == 0 {
			delete(p.nacks, key)
		}
	}
}

// redeliverDueLocked asks the broker to redeliver the negatively acknowledged entries
// whose delay has passed. The acknowledgements grouped so far go first, so the ack_set
// the broker redelivers a batch with leaves out what the application acknowledged.
func (p *partitionConsumer) redeliverDueLocked(now time.Time) {
	if len(p.nacks) == 0 || p.cn == nil {
		return
	}
	var ids []*pb.MessageIdData
	for k, n := range p.nacks {
		if now.Before(n.due) {
			continue
		}
		delete(p.nacks, k)
		if t := p.trackers[k]; t != nil && (p.opts.Type == Shared || p.opts.Type == KeyShared) {
			// The entry may come back here, or go to another consumer: the tracker
			// stays, to deliver only what was handed back, until handBackExpiry.
			t.handBack(n.indexes, now)
		}
		ids = append(ids, &pb.MessageIdData{LedgerId: proto.Uint64(k.ledger), EntryId: proto.Uint64(k.entry)})
	}
	if len(ids) == 0 {
		return
	}
	p.flushAcksLocked()
	if p.opts.Type == Shared || p.opts.Type == KeyShared {
		_ = p.cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(),
			RedeliverUnacknowledgedMessages: &pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(p.id), MessageIds: ids}})
		return
	}
	// Exclusive and Failover subscriptions redeliver everything not acknowledged.
	p.mu.Unlock()
	p.redeliverAll()
	p.mu.Lock()
}

// expireHandedBackLocked forgets the trackers of entries handed back that did not come
// again within handBackExpiry, and the hand-back records of those that came fewer times
// than handed back (the broker found the entry not yet dispatched again and sent it once).
func (p *partitionConsumer) expireHandedBackLocked(now time.Time) {
	if now.Sub(p.expiredAt) < time.Second {
		return // a look once a second is enough for an expiry in minutes
	}
	p.expiredAt = now
	for k, t := range p.trackers {
		if !t.handedBack.IsZero() && now.Sub(t.handedBack) >= handBackExpiry {
			if t.came {
				t.forgetHandBack()
			} else {
				delete(p.trackers, k)
			}
		}
	}
}

func (p *partitionConsumer) redeliverAll() {
	freed, bytes := p.c.removeFrom(p)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heldBytes = max(0, p.heldBytes-bytes)
	if p.cn == nil {
		return
	}
	p.flushAcksLocked() // what was acknowledged is not redelivered
	if p.opts.Type == Shared || p.opts.Type == KeyShared {
		// Every entry goes back, perhaps to other consumers: all that is outstanding
		// of each batch is delivered again if it comes here (see batchTracker).
		now := time.Now()
		for _, t := range p.trackers {
			var all []int32
			for i := range t.size {
				if t.outstanding(i) {
					all = append(all, int32(i))
				}
			}
			t.handBack(all, now)
		}
	}
	_ = p.cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(),
		RedeliverUnacknowledgedMessages: &pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(p.id)}})
	p.returnPermitsLocked(freed)
}

func (p *partitionConsumer) connectionLost(h *consumerHandle, reason error) {
	p.mu.Lock()
	if p.reg != h {
		p.mu.Unlock()
		return // an older registration's connection
	}
	if p.state == stateRegistering {
		h.lost = reason // connect fails the attempt and retries
		p.mu.Unlock()
		return
	}
	p.detachLocked(h)
	if p.state != stateReady {
		p.mu.Unlock()
		return
	}
	p.state = stateReconnecting
	if p.progressed || time.Since(p.readyAt) >= stableAfter(p.opts.Backoff) {
		p.attempts = 0
	} else {
		p.attempts++
	}
	// Whatever was buffered or half reassembled comes again on the next subscription;
	// the permits in flight went with the connection.
	p.dropAllChunksLocked()
	p.unreserveLocked()
	// Every unacknowledged entry is delivered again (on a shared subscription perhaps to
	// another consumer): its batch tracker goes, or it would stay for ever.
	p.trackers = map[entryKey]*batchTracker{}
	p.mu.Unlock()
	p.c.removeFrom(p)
	p.log.Warn("consumer disconnected; resubscribing", "reason", reason)
	select {
	case p.reconnectCh <- struct{}{}:
	default:
	}
}

func (p *partitionConsumer) run() {
	defer p.wg.Done()
	tick := p.opts.AckGroupTime
	if tick <= 0 {
		tick = 100 * time.Millisecond
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-p.reconnectCh:
			p.reconnect()
		case now := <-ticker.C:
			p.mu.Lock()
			p.flushAcksLocked()
			p.redeliverDueLocked(now)
			p.expireHandedBackLocked(now)
			p.releaseIdleLocked(now)
			p.undecodableLog.flush(p.log, now)
			reassembling := len(p.chunkOrder) > 0
			for len(p.chunkOrder) > 0 && now.Sub(p.chunks[p.chunkOrder[0]].created) > p.opts.ChunkExpiry {
				p.dropChunksLocked(p.chunkOrder[0], "expired")
			}
			if p.byteMode() && (reassembling || p.starvedLocked()) {
				// A partition reassembling messages, or left without permits while the
				// application holds what it took (see Consumer.Settled), waits for room
				// with nothing queued, so no message taken grants its permits again: the
				// budget may have room now, or the expiry above left it idle. (Only
				// then: a quiet partition's withheld permits wait for its messages to be
				// taken, or a grant on every tick would take the room others wait for,
				// see reservationIdle.)
				p.grantLocked()
			}
			p.mu.Unlock()
		}
	}
}

func (p *partitionConsumer) reconnect() {
	for {
		p.mu.Lock()
		stop := p.state != stateReconnecting
		attempts := p.attempts
		p.mu.Unlock()
		if stop {
			return
		}
		if attempts > 0 {
			t := time.NewTimer(p.opts.Backoff.delay(attempts - 1))
			select {
			case <-p.done:
				t.Stop()
				return
			case <-t.C:
			}
		}
		ctx, cancel := contextUntil(p.done)
		err := p.connect(ctx, false)
		cancel()
		if err == nil {
			p.log.Info("consumer resubscribed")
			return // counted by connect, when it made the consumer ready
		}
		p.mu.Lock()
		p.attempts++
		attempts = p.attempts
		p.mu.Unlock()
		if permanentRegistrationError(err, true) {
			p.fail(err)
			return
		}
		p.log.Warn("resubscribe failed", "attempt", attempts, "error", err)
	}
}

// fail stops the partition consumer for good after a permanent refusal: the consumer's
// Receive returns ErrConsumerFailed (wrapping err) once the messages already queued are taken.
func (p *partitionConsumer) fail(err error) {
	p.mu.Lock()
	if p.closing || p.state == stateFailed {
		p.mu.Unlock()
		return
	}
	p.state = stateFailed
	if p.reg != nil {
		p.detachLocked(p.reg)
	}
	p.unreserveLocked()
	p.dropAllChunksLocked()
	p.mu.Unlock()
	p.log.Error("consumer failed", "error", err)
	p.c.partitionFailed(fmt.Errorf("%w: %s: %w", ErrConsumerFailed, p.topic, err))
}

func (p *partitionConsumer) close(ctx context.Context) {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return
	}
	p.flushAcksLocked()
	p.closing = true
	p.state = stateClosed
	p.unreserveLocked()
	p.dropAllChunksLocked()
	cn := p.cn // set only when ready
	if p.reg != nil {
		p.detachLocked(p.reg)
	}
	p.mu.Unlock()
	if cn != nil {
		reqID := p.client.nextRequestID()
		_, err := cn.Request(ctx, reqID, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(),
			CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(p.id), RequestId: proto.Uint64(reqID)}})
		if err != nil && !errors.Is(err, ErrConnectionClosed) {
			p.log.Warn("closing the consumer on the broker", "error", err)
		}
	}
	close(p.done)
	p.wg.Wait()
}
