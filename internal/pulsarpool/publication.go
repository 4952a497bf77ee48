package pulsarpool

import (
	"strings"
	"sync"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/pulsar"
)

// publication is a record between SendAsync and its callback. Pooled, with its
// callback made once per publication: a closure made per record was one of the ingress
// path's allocations per record.
type publication struct {
	ps              *Pool
	e               *producerEntry
	size            int64
	producer, topic string
	done            func(string, error)
	settle          func(pulsar.MessageID, error) // p.complete, made once
}

var publicationPool sync.Pool // of *publication; no New: its callback refers to the pool

func newPublication() *publication {
	if p, ok := publicationPool.Get().(*publication); ok {
		return p
	}
	p := &publication{}
	p.settle = p.complete
	return p
}

func (p *publication) complete(id pulsar.MessageID, err error) {
	ps, e, size, producer, topic, done := p.ps, p.e, p.size, p.producer, p.topic, p.done
	*p = publication{settle: p.settle}
	publicationPool.Put(p) // the producer runs a callback once
	ps.o.Budget.Release(size)
	if err != nil {
		err = Classify(err)
		if producer != "" {
			err = ps.stopNamedAt(producer, topic, err) // before the eviction, so no new producer takes the next record
		}
	}
	if err != nil && (failed(err) || e.p.Err() != nil) {
		ps.evict(e, err)
	}
	ps.release(e)
	switch {
	case err != nil:
		done("", err)
	case id.Duplicate():
		done("", ingress.ErrDuplicate)
	default:
		a := idArenas.Get().(*idArena)
		s := a.format(id)
		idArenas.Put(a)
		done(s, nil)
	}
}

// idArena makes published records' message ids out of shared 1 KiB blocks: one
// allocation for dozens of ids instead of one each, which was the last allocation per
// record of the ingress path. A strings.Builder only ever appends, so the strings it
// returned never change; an id a caller keeps (a stream's first and last) keeps its
// block alive, 1 KiB at most.
type idArena struct{ b strings.Builder }

const idArenaBlock = 1 << 10

var idArenas = sync.Pool{New: func() any { return new(idArena) }}

func (a *idArena) format(id pulsar.MessageID) string {
	var tmp [64]byte
	s := appendID(tmp[:0], id)
	if a.b.Cap()-a.b.Len() < len(s) {
		a.b = strings.Builder{} // the old block stays with the strings made from it
		a.b.Grow(idArenaBlock)
	}
	n := a.b.Len()
	a.b.Write(s)
	return a.b.String()[n:]
}
