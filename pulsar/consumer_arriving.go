package pulsar

// Arriving says whether a message may reach the queue within microseconds, without
// waiting for the network: a connection of one of the consumer's partitions has read a
// whole further frame from the broker (the broker writes a burst of entries at once) and
// is dispatching the ones before it. The frame may be another consumer's, or no message
// at all, so it is a hint: an application that found the queue empty (TryReceive) can
// try again rather than, say, flush its output once per message, and must stop trying
// once Arriving says false.
func (c *Consumer) Arriving() bool {
	for _, p := range c.partitions() {
		p.mu.Lock()
		cn := p.cn
		p.mu.Unlock()
		if cn != nil && cn.FrameAtHand() {
			return true
		}
	}
	return false
}
