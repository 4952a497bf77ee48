package pulsar

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/delivery"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

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

// dropAllChunksLocked forgets every message being reassembled and returns their
// charge: they come again on the next subscription, or the consumer is done.
func (p *partitionConsumer) dropAllChunksLocked() {
	p.releaseLocked(p.chunkBytes)
	p.chunks, p.chunkOrder, p.chunkBytes = map[string]*chunkCtx{}, nil, 0
}

// ackDroppedLocked acknowledges a chunk entry that was dropped (grouped with the others).
func (p *partitionConsumer) ackDroppedLocked(id MessageID) {
	key := entryKey{uint64(id.LedgerID), uint64(id.EntryID)}
	p.acks[key] = newIDData(key.ledger, key.entry)
}
