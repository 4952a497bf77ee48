package egress

import (
	"fmt"
	"io"

	"github.com/recordio-bridge/bridge/mapping"
)

// FilterObserver, when the Observer implements it too, counts the messages a stream's
// filter did not keep (acknowledged without being written).
type FilterObserver interface {
	Filtered(stream string, n int64)
}

// filterNow is the stream's filter as the configuration now says: a reload that changes
// it applies to the next message. A stream whose definition a reload removed keeps the
// filter it had.
func (st *stream) filterNow() *mapping.Filter {
	s := st.srv.state.Load()
	if s == nil {
		return st.def.Filter
	}
	if s.table != st.filterOf {
		st.filterOf, st.filter = s.table, st.def.Filter
		for _, d := range s.table.Streams() {
			if d.Name == st.def.Name {
				st.filter = d.Filter
				break
			}
		}
	}
	return st.filter
}

// filtered reports whether the stream's filter leaves d out. d is then acknowledged
// (a message of a batch on its own: the consumer acknowledges the whole entry once
// none of its messages is outstanding) and counted; it is never written, and takes no
// position. A message held as a stream is read whole first when the filter looks into
// payloads and it is no larger than a conversion reads; a larger one, and an encrypted
// one, are delivered: the filter cannot tell whether it keeps them.
func (st *stream) filtered(d *Delivery) (bool, error) {
	f := st.filterNow()
	if f == nil {
		return false, nil
	}
	m := mapping.Message{Key: d.Key, Properties: d.Properties}
	if f.ReadsPayload() {
		if d.Encryption != nil || d.Body != nil && d.Size > maxConvertBytes {
			// The filter cannot tell whether it keeps this message: delivered, as
			// acknowledging it unseen would lose a message the filter may keep.
			return false, nil
		}
		if d.Body != nil {
			b, err := io.ReadAll(d.Body)
			if err != nil {
				return false, fmt.Errorf("message %s: reading its body for the stream's filter: %w", d.ID, err)
			}
			d.Payload, d.Body, d.Size = b, nil, 0
		}
		m.Payload = d.Payload
	}
	if f.Keeps(m) {
		return false, nil
	}
	if pc, ok := st.sub.(PayloadCopier); ok {
		// Read for the last time: the frame it came in may be reused once its siblings
		// are written and settled (without this, never).
		pc.Copied(d)
	}
	_ = st.sub.Ack(d)
	if o, ok := st.srv.obs.(FilterObserver); ok {
		o.Filtered(st.def.Name, 1)
	}
	return true, nil
}
