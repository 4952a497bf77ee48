package chaos

import (
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/faultproxy"
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

// TestRecoveryCountsOnlyRecordsSentAfterTheFault: a broker that froze for good wrote the
// receipts of what it had stored just before; they arrive after the fault, yet say nothing of
// recovery. Only a receipt of a record sent after the fault does.
func TestRecoveryCountsOnlyRecordsSentAfterTheFault(t *testing.T) {
	fault := time.Unix(2000, 0)
	ic := newIngressClient("", "", "", 0)
	e := &env{ins: []*ingressClient{ic}}
	ic.noteReceiptLocked(fault.Add(-5*time.Millisecond).UnixNano(), fault.Add(2*time.Millisecond).UnixNano())
	if e.allReceiptedSince(fault) {
		t.Error("a receipt that arrived after the fault for a record sent before it counts as recovery")
	}
	if !e.allReceiptedSince(time.Time{}) {
		t.Error("a stream with a receipt has none since the beginning")
	}
	ic.noteReceiptLocked(fault.Add(11*time.Second).UnixNano(), fault.Add(12*time.Second).UnixNano())
	if !e.allReceiptedSince(fault) {
		t.Error("a receipt of a record sent after the fault does not count as recovery")
	}
}

// soakSamples makes one process's samples every 10 s for d from start, RSS and goroutines
// given by f at each moment.
func soakSamples(start time.Time, d time.Duration, f func(at time.Duration) (int64, int)) []soakSample {
	var ss []soakSample
	for at := time.Duration(0); at < d; at += sampleEvery {
		rss, g := f(at)
		ss = append(ss, soakSample{at: start.Add(at), replica: 0, incarnation: 1, rss: rss << 20, goroutines: g})
	}
	return ss
}

// TestASoakIsJudgedOnItsLevelAfterWarmUp: the soak's judgement of a replica, on made-up
// samples. Growth during warm-up, a single spike (one sample, a fault) and noise within
// ±10 % pass; a steady climb to 20 % above the level after warm-up, or goroutines that
// double for good, fail; a process too short-lived to have a level is not judged.
func TestASoakIsJudgedOnItsLevelAfterWarmUp(t *testing.T) {
	start := time.Unix(1000, 0)
	warm := 2 * time.Minute
	steady := func(at time.Duration) (int64, int) {
		if at < warm {
			return 20 + int64(at/time.Second)/6, 50 + int(at/time.Second)/3 // climbing to the level
		}
		rss, g := int64(40), 90
		if at == 10*time.Minute { // one sample at a fault
			rss, g = 80, 300
		}
		if (at/sampleEvery)%2 == 0 {
			rss, g = rss+2, g+5 // noise, within 10 %
		}
		return rss, g
	}
	if j := judgeSoak(soakSamples(start, 30*time.Minute, steady), start, warm); !j.judged || !j.ok {
		t.Errorf("a steady process fails: %+v", j)
	}
	climb := func(at time.Duration) (int64, int) {
		if at < warm {
			return 40, 90
		}
		return 40 + int64(8*(at-warm)/(28*time.Minute)), 90 // +20 % by the end
	}
	if j := judgeSoak(soakSamples(start, 30*time.Minute, climb), start, warm); !j.judged || j.ok || j.rssDev < 0.15 {
		t.Errorf("a process whose RSS climbs 20 %% passes: %+v", j)
	}
	leak := func(at time.Duration) (int64, int) {
		if at < 10*time.Minute {
			return 40, 90
		}
		return 40, 180
	}
	if j := judgeSoak(soakSamples(start, 30*time.Minute, leak), start, warm); !j.judged || j.ok || j.gDev < 0.9 {
		t.Errorf("a process whose goroutines double passes: %+v", j)
	}
	if j := judgeSoak(soakSamples(start, 3*time.Minute, steady), start, warm); j.judged {
		t.Errorf("a process that lived 3 minutes with a 2-minute warm-up is judged: %+v", j)
	}
}

// TestASoakIsNotMovedByStreamsReconnectingButFailsALeak: a replica whose goroutine count
// jumps with its streams' reconnections (each sample 0 to 29 above a base of 70, a named
// stream's producers opened and closed with each request) passes; the same with one more
// goroutine a minute (a leak per minute), or one left behind by every other reconnection
// (a leak per stream served), fails.
func TestASoakIsNotMovedByStreamsReconnectingButFailsALeak(t *testing.T) {
	start := time.Unix(1000, 0)
	warm := 5 * time.Minute
	d := 60 * time.Minute
	mk := func(leak func(at time.Duration, k int) int) []soakSample {
		var ss []soakSample
		for at, k := time.Duration(0), 0; at < d; at, k = at+sampleEvery, k+1 {
			g := 70 + (k*37)%30 + leak(at, k) // reconnections caught mid-way, 0 to 29 more
			ss = append(ss, soakSample{at: start.Add(at), incarnation: 1, rss: 40 << 20, goroutines: g, ingress: 4, egress: 3})
		}
		return ss
	}
	steady := mk(func(time.Duration, int) int { return 0 })
	if j := judgeSoak(steady, start, warm); !j.judged || !j.ok {
		t.Errorf("a replica whose goroutines only jump with its streams' reconnections fails: %+v", j)
	}
	if j := judgeSoak(steady, start, warm); float64(j.gRawHi-j.gRawLo) < 0.3*j.gLevel {
		t.Fatalf("the made-up counts do not jump (%d–%d): the case proves nothing", j.gRawLo, j.gRawHi)
	}
	perMinute := mk(func(at time.Duration, _ int) int { return int(at / time.Minute) })
	if j := judgeSoak(perMinute, start, warm); !j.judged || j.ok {
		t.Errorf("a replica leaking a goroutine a minute passes: %+v", j)
	}
	perStream := mk(func(_ time.Duration, k int) int { return k / 6 }) // a stream reconnects every 30 s, every other leaks
	if j := judgeSoak(perStream, start, warm); !j.judged || j.ok {
		t.Errorf("a replica leaking a goroutine every other reconnection passes: %+v", j)
	}
}

// loadedBaseline makes four ingress clients with one receipt every 20 ms, each 7 ms after its
// send, over [warm, t0), but for one stall of the whole machine of length stall from
// warm+1 s: every record sent during it is receipted only when it ends (as on a busy machine
// where the suite shares two cores with other builds).
func loadedBaseline(warm, t0 time.Time, stall time.Duration) []*ingressClient {
	var ics []*ingressClient
	stop := warm.Add(time.Second)
	resume := stop.Add(stall)
	for range 4 {
		ic := newIngressClient("", "", "", 0)
		for at := warm; at.Before(t0); at = at.Add(20 * time.Millisecond) {
			got := at.Add(7 * time.Millisecond)
			if !at.Before(stop) && at.Before(resume) {
				got = resume.Add(7 * time.Millisecond)
			}
			ic.receipts = append(ic.receipts, receiptTimes{sent: at.UnixNano(), got: got.UnixNano()})
		}
		ics = append(ics, ic)
	}
	return ics
}

// TestALoadedBaselineStillSeesTheFault: a stall of the machine during the baseline (a
// second in which nothing ran, which lifts the baseline's 90th percentile to 700 ms and its
// longest gap to a second) does not hide a fault: records receipted after 100 ms ± 100 ms
// each way (a median of 364 ms, as the suite measured) are delayed, and four seconds without
// a receipt are a stall. A fault that changed nothing (receipts as quick as before, even with
// the machine stalling again during it) is still no effect, and so is a fault proxy that met
// only a few keep-alives; one that acted on the bridge's traffic is an effect whatever the
// receipts show.
func TestALoadedBaselineStillSeesTheFault(t *testing.T) {
	warm := time.Unix(1000, 0)
	t0 := warm.Add(baseline)
	over := t0.Add(8 * time.Second)
	judge := func(fault func(ic *ingressClient), k tally) disturbance {
		ics := loadedBaseline(warm, t0, time.Second)
		for _, ic := range ics {
			fault(ic)
		}
		e := &env{ins: ics}
		return e.disturbance(tally{}, k, warm, t0, over)
	}
	latency := func(ic *ingressClient) {
		// 100 ms ± 100 ms on the way out and on the way back, and the bridge's batching:
		// spread evenly from 164 ms to 564 ms.
		i := 0
		for at := t0; at.Before(over); at = at.Add(20 * time.Millisecond) {
			l := 164*time.Millisecond + time.Duration(i%100)*4*time.Millisecond
			ic.receipts = append(ic.receipts, receiptTimes{sent: at.UnixNano(), got: at.Add(l).UnixNano()})
			i++
		}
	}
	d := judge(latency, tally{})
	if d.baseP90 < 500*time.Millisecond || d.baseStall < time.Second {
		t.Fatalf("the made-up baseline is not loaded (p90 %s, longest stall %s): the case proves nothing", d.baseP90, d.baseStall)
	}
	if d.faultMedian < d.baseMedian*10 || d.faultMedian > d.baseP90 {
		t.Fatalf("the made-up fault's median %s is not between ten baseline medians and the baseline's p90 %s: the case proves nothing", d.faultMedian, d.baseP90)
	}
	if !d.delayed() || !d.any() {
		t.Errorf("100 ms ± 100 ms each way after a loaded baseline is no effect: %s", d)
	}
	stall := func(ic *ingressClient) { // nothing from t0+1 s for 4 s, then all at once
		stop, resume := t0.Add(time.Second), t0.Add(5*time.Second)
		for at := t0; at.Before(over); at = at.Add(20 * time.Millisecond) {
			got := at.Add(7 * time.Millisecond)
			if !at.Before(stop) && at.Before(resume) {
				got = resume.Add(7 * time.Millisecond)
			}
			ic.receipts = append(ic.receipts, receiptTimes{sent: at.UnixNano(), got: got.UnixNano()})
		}
	}
	if d := judge(stall, tally{}); !d.stalled() || !d.any() {
		t.Errorf("4 s without receipts after a loaded baseline is no effect: %s", d)
	}

	nothing := func(ic *ingressClient) { receiptsEvery(ic, t0, over, 20*time.Millisecond, 7*time.Millisecond) }
	if d := judge(nothing, tally{}); d.any() {
		t.Errorf("receipts as before the fault, after a loaded baseline, count as an effect: %s", d)
	}
	stalledAgain := func(ic *ingressClient) { // the machine stalls for a second during the fault too
		stop, resume := t0.Add(2*time.Second), t0.Add(3*time.Second)
		for at := t0; at.Before(over); at = at.Add(20 * time.Millisecond) {
			got := at.Add(7 * time.Millisecond)
			if !at.Before(stop) && at.Before(resume) {
				got = resume.Add(7 * time.Millisecond)
			}
			ic.receipts = append(ic.receipts, receiptTimes{sent: at.UnixNano(), got: got.UnixNano()})
		}
	}
	if d := judge(stalledAgain, tally{}); d.any() {
		t.Errorf("a fault that changed nothing while the machine stalled a second again counts as an effect: %s", d)
	}
	keepAlives := tally{proxy: faultproxy.Stats{Chunks: 8, Faulted: 4, Held: 800 * time.Millisecond}}
	if d := judge(nothing, keepAlives); d.any() {
		t.Errorf("a fault proxy that delayed 4 keep-alive chunks and receipts as before count as an effect: %s", d)
	}
	traffic := tally{proxy: faultproxy.Stats{Chunks: 3200, Faulted: 3200, Held: 480 * time.Second}}
	if d := judge(nothing, traffic); !d.acted() || !d.any() {
		t.Errorf("a fault proxy that delayed 3200 chunks of the bridge's traffic is no effect: %s", d)
	}
}
