package chaos

import (
	"testing"
	"time"
)

// receiptsEvery makes an ingress client that had one receipt every step in [from, to),
// each latency after its send.
func receiptsEvery(ic *ingressClient, from, to time.Time, step, latency time.Duration) {
	for at := from; at.Before(to); at = at.Add(step) {
		ic.receipts = append(ic.receipts, receiptTimes{sent: at.UnixNano(), got: at.Add(latency).UnixNano()})
	}
}

// TestAFaultThatChangedNothingHasNoEffect: the scenarios' judgement of a fault, on made-up
// receipts. Receipts as quick and as regular during the fault as before it, with no
// reconnect, failure or broken stream, are no effect; receipts much slower than before, a
// long stall or any reconnect are one.
func TestAFaultThatChangedNothingHasNoEffect(t *testing.T) {
	warm := time.Unix(1000, 0)
	t0 := warm.Add(baseline)
	over := t0.Add(10 * time.Second)
	judge := func(faultLatency time.Duration, stall bool, k tally) disturbance {
		ic := newIngressClient("", "", "", 0)
		receiptsEvery(ic, warm, t0, 20*time.Millisecond, 10*time.Millisecond)
		if stall {
			receiptsEvery(ic, t0.Add(8*time.Second), over, 20*time.Millisecond, faultLatency)
		} else {
			receiptsEvery(ic, t0, over, 20*time.Millisecond, faultLatency)
		}
		e := &env{ins: []*ingressClient{ic}}
		return e.disturbance(tally{}, k, warm, t0, over)
	}
	if d := judge(10*time.Millisecond, false, tally{}); d.any() {
		t.Errorf("receipts as before the fault count as an effect: %s", d)
	}
	if d := judge(12*time.Millisecond, false, tally{}); d.any() {
		t.Errorf("receipts a little slower than before the fault count as an effect: %s", d)
	}
	if d := judge(300*time.Millisecond, false, tally{}); !d.delayed() || !d.any() {
		t.Errorf("receipts 30 times slower than before the fault are no effect: %s", d)
	}
	if d := judge(10*time.Millisecond, true, tally{}); !d.stalled() || !d.any() {
		t.Errorf("8 s without receipts after 3 s with one every 20 ms is no effect: %s", d)
	}
	for _, k := range []tally{{reconnects: 1}, {failed: 1}, {requests: 1}, {egressE: 1}} {
		if d := judge(10*time.Millisecond, false, k); !d.any() {
			t.Errorf("%+v is no effect: %s", k, d)
		}
	}
}

// TestInFlightAtAFaultCountsTheUnreceipted: the duplicates' bound is the most records sent
// and not yet receipted at once from each fault on.
func TestInFlightAtAFaultCountsTheUnreceipted(t *testing.T) {
	ic := newIngressClient("", "", "", 0)
	ic.next, ic.peak = 40, 40
	for i := range 30 {
		ic.receipted[string(rune('a'+i))] = "m"
	}
	e := &env{ins: []*ingressClient{ic}}
	e.fault(t) // 10 in flight now: the window starts from them, not from the peak before
	ic.mu.Lock()
	ic.next += 5
	ic.peak = max(ic.peak, ic.next-len(ic.receipted))
	ic.mu.Unlock()
	e.closeWindow()
	if e.inFlight != 15 {
		t.Errorf("in flight at the fault: %d, want 15 (10 at the fault, 5 more sent before any receipt)", e.inFlight)
	}
	e.closeWindow() // no fault open: nothing added
	if e.inFlight != 15 {
		t.Errorf("in flight after a window closed twice: %d, want 15", e.inFlight)
	}
}
