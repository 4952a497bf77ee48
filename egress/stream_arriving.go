package egress

import "runtime"

// maxArrivingWaits bounds how many times a stream yields for a message its consumer is
// dispatching (a few microseconds each) before it flushes what it wrote anyway.
const maxArrivingWaits = 64

// arriving takes the next message if the consumer is dispatching one already read from
// the broker (Arriver): the broker writes entries in bursts, and the consumer's reader
// hands them over one at a time, so a stream that keeps up found its queue empty after
// each and flushed (a write, and an acknowledgement) once per message. It gives up as
// soon as nothing more is on its way, so a lone message is flushed at once.
func (st *stream) arriving() (*Delivery, bool) {
	a, ok := st.sub.(Arriver)
	if !ok {
		return nil, false
	}
	for range maxArrivingWaits {
		if !a.Arriving() {
			return nil, false
		}
		runtime.Gosched()
		if d, ok := st.sub.TryReceive(); ok {
			return d, true
		}
	}
	return nil, false
}
