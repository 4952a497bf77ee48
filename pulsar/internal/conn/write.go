package conn

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// SendFrame queues an already encoded frame (a SEND kept for resending).
func (c *Conn) SendFrame(raw []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	if len(raw) >= largeFrame {
		if len(c.tail) > 0 {
			c.queue = append(c.queue, c.tail)
			c.tail = nil
		}
		c.queue = append(c.queue, raw) // by reference: the caller keeps raw unchanged
	} else {
		c.tail = append(c.tail, raw...)
	}
	c.kickWriter()
	return nil
}

// largeFrame is the size from which SendFrame queues a frame by reference.
const largeFrame = 16 << 10

// Send queues a simple command frame.
func (c *Conn) Send(cmd *pb.BaseCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	var err error
	c.tail, err = frame.AppendCommand(c.tail, cmd)
	c.kickWriter()
	return err
}

// SendPayload queues a payload frame (SEND). metadata is the marshaled MessageMetadata.
func (c *Conn) SendPayload(cmd *pb.BaseCommand, metadata, payload []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	var err error
	before := len(c.tail)
	c.tail, err = frame.AppendPayloadCommand(c.tail, cmd, metadata, payload, c.maxMessageSize+frame.Padding)
	if err != nil {
		c.tail = c.tail[:before]
		return err
	}
	c.kickWriter()
	return nil
}

func (c *Conn) kickWriter() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// writeChunk is how much one write may carry under one deadline: the write timeout
// bounds a stall, not the time a large backlog takes on a slow link.
const writeChunk = 1 << 20

// writeAll writes bufs with writev, at most writeChunk bytes per call, each call under
// a fresh deadline. bufs itself is left as it was (the caller reuses it).
func (c *Conn) writeAll(bufs [][]byte) (int64, error) {
	var written int64
	piece := c.spareWrite[:0]
	defer func() { clear(piece[:cap(piece)]); c.spareWrite = piece[:0] }()
	i, off := 0, 0 // the next byte to write is bufs[i][off]
	for i < len(bufs) {
		piece = piece[:0]
		size := 0
		for i < len(bufs) && size < writeChunk {
			b := bufs[i][off:]
			if room := writeChunk - size; len(b) > room {
				piece = append(piece, b[:room])
				off += room
				size += room
				break
			}
			piece = append(piece, b)
			size += len(b)
			i, off = i+1, 0
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
		nb := net.Buffers(piece)
		n, err := nb.WriteTo(c.nc)
		written += n
		if err != nil {
			return written, err
		}
		c.live.wrote(n)
	}
	return written, nil
}

// writeLoop drains the queued frames, many at a time, each write under a deadline.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.kick:
		}
		// Take what is queued; producers go on appending to fresh buffers meanwhile.
		c.mu.Lock()
		bufs, tail := c.queue, c.tail
		if len(tail) > 0 {
			bufs = append(bufs, tail)
		}
		ping := c.pingInTail
		c.pingInTail = false
		c.queue, c.tail = c.spareQueue[:0], c.spareTail[:0]
		c.spareQueue, c.spareTail = nil, nil
		c.mu.Unlock()
		if len(bufs) == 0 {
			c.spareQueue, c.spareTail = bufs, tail
			continue
		}
		if n, err := c.writeAll(bufs); err != nil {
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				err = fmt.Errorf("%w: no progress for %s after %d bytes: %v", ErrWriteTimeout, c.opts.WriteTimeout, n, err)
			} else {
				err = fmt.Errorf("writing to the broker: %w", err)
			}
			c.closeWith(err)
			return
		}
		if ping {
			c.live.wrotePing()
		}
		c.mu.Lock()
		backlog := len(c.queue) > 0 || len(c.tail) > 0
		c.mu.Unlock()
		if !backlog {
			c.live.wentIdle()
		}
		c.lastSent.Store(time.Now().UnixNano())
		clear(bufs) // drop references to frames the producers own
		if cap(tail) > 4<<20 {
			tail = nil // don't pin a burst's buffer forever
		}
		c.spareQueue, c.spareTail = bufs[:0], tail[:0] // only this goroutine touches the spares
	}
}
