package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The soak (make soak): the mixed load of TestReplicasBehindHAProxy through the three
// replicas for SOAK_DURATION (1h in make soak) with a fault every few minutes. Every 10 s
// each replica's resident memory (/proc), goroutines and open streams (one /metrics scrape)
// are sampled; after a warm-up, its memory and the goroutines its open streams do not
// account for must stay within ±10 % of their level, and nothing may be lost.

const (
	sampleEvery   = 10 * time.Second
	soakTolerance = 0.10
	soakSmooth    = 12 // samples in the level and in the rolling median compared with it (2 min)
)

type soakSample struct {
	at          time.Time
	replica     int
	incarnation int
	rss         int64
	goroutines  int
	ingress     int // ingress streams open at the sample
	egress      int // egress streams open at the sample
}

// soakJudged is one replica process's figures.
type soakJudged struct {
	replica, incarnation int
	from, to             time.Time
	samples              int
	judged               bool
	rssLevel, rssLo      float64 // MiB: the level after warm-up, the smoothed range after it
	rssHi, rssDev        float64
	rssRawLo, rssRawHi   float64
	gLevel, gLo, gHi     float64
	gDev                 float64
	gRawLo, gRawHi       int
	perIngress           float64 // goroutines per open ingress stream, fitted
	perEgress            float64 // goroutines per open egress stream, fitted
	ok                   bool
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// judgeSoak computes, for one process's samples (in time order), its level (the median of
// the soakSmooth samples after warm-up) and how far the rolling median of soakSmooth
// samples strays from it afterwards: a level, not one sample, since a sample can land on a
// fault or a stream's reconnection. For goroutines the judged figure is the count its open
// streams do not account for: a replica's streams come and go (each reconnects through the
// balancer), and a named stream holds a producer per partition it reaches, so the raw count
// follows the streams the balancer gave it at that instant. The goroutines per ingress and
// per egress stream are fitted over the process's samples after warm-up (least squares,
// with a constant); what is left, the process's own goroutines, is what a leak would raise.
func judgeSoak(ss []soakSample, start time.Time, warm time.Duration) soakJudged {
	j := soakJudged{replica: ss[0].replica, incarnation: ss[0].incarnation, from: ss[0].at, to: ss[len(ss)-1].at, samples: len(ss)}
	var after []soakSample
	levelN := 0
	for _, s := range ss {
		switch {
		case s.at.Before(start.Add(warm)):
		case s.at.Before(start.Add(warm + soakSmooth*sampleEvery)):
			levelN++
			after = append(after, s)
		default:
			after = append(after, s)
		}
	}
	if levelN < soakSmooth/2 || len(after) < levelN+soakSmooth {
		return j // too short a life to judge
	}
	j.judged = true
	j.perIngress, j.perEgress = perStreamGoroutines(after)
	rss := func(s soakSample) float64 { return float64(s.rss) / (1 << 20) }
	own := func(s soakSample) float64 {
		return float64(s.goroutines) - j.perIngress*float64(s.ingress) - j.perEgress*float64(s.egress)
	}
	var levelR, levelG []float64
	for _, s := range after[:levelN] {
		levelR, levelG = append(levelR, rss(s)), append(levelG, own(s))
	}
	j.rssLevel, j.gLevel = median(levelR), median(levelG)
	j.rssLo, j.rssHi, j.gLo, j.gHi = j.rssLevel, j.rssLevel, j.gLevel, j.gLevel
	j.rssRawLo, j.rssRawHi = rss(after[0]), rss(after[0])
	j.gRawLo, j.gRawHi = after[0].goroutines, after[0].goroutines
	for i := range after {
		j.rssRawLo, j.rssRawHi = min(j.rssRawLo, rss(after[i])), max(j.rssRawHi, rss(after[i]))
		j.gRawLo, j.gRawHi = min(j.gRawLo, after[i].goroutines), max(j.gRawHi, after[i].goroutines)
		if i+1 < soakSmooth {
			continue
		}
		var wr, wg []float64
		for _, s := range after[i+1-soakSmooth : i+1] {
			wr, wg = append(wr, rss(s)), append(wg, own(s))
		}
		mr, mg := median(wr), median(wg)
		j.rssLo, j.rssHi = min(j.rssLo, mr), max(j.rssHi, mr)
		j.gLo, j.gHi = min(j.gLo, mg), max(j.gHi, mg)
	}
	dev := func(level, lo, hi float64) float64 { return max(hi-level, level-lo) / level }
	j.rssDev, j.gDev = dev(j.rssLevel, j.rssLo, j.rssHi), dev(j.gLevel, j.gLo, j.gHi)
	j.ok = j.rssDev <= soakTolerance && j.gDev <= soakTolerance && j.gLevel > 0
	return j
}

// perStreamGoroutines fits goroutines = own + a·ingress + b·egress over the samples by least
// squares and gives a and b, neither below 0 (a stream holds goroutines, it does not free
// the process's own). A kind of stream whose count never changed over the samples cannot
// be told from the constant and gets 0: its goroutines stay in the process's own figure.
func perStreamGoroutines(ss []soakSample) (a, b float64) {
	fit := func(useI, useE bool) (float64, float64) {
		// Centred normal equations: the constant drops out.
		var mg, mi, me float64
		for _, s := range ss {
			mg, mi, me = mg+float64(s.goroutines), mi+float64(s.ingress), me+float64(s.egress)
		}
		n := float64(len(ss))
		mg, mi, me = mg/n, mi/n, me/n
		var sii, see, sie, sig, seg float64
		for _, s := range ss {
			di, de, dg := float64(s.ingress)-mi, float64(s.egress)-me, float64(s.goroutines)-mg
			sii, see, sie, sig, seg = sii+di*di, see+de*de, sie+di*de, sig+di*dg, seg+de*dg
		}
		switch {
		case useI && useE:
			if det := sii*see - sie*sie; det > 1e-9*max(sii*see, 1) {
				return (sig*see - seg*sie) / det, (seg*sii - sig*sie) / det
			}
			return 0, 0
		case useI && sii > 0:
			return sig / sii, 0
		case useE && see > 0:
			return 0, seg / see
		}
		return 0, 0
	}
	a, b = fit(true, true)
	if a == 0 && b == 0 { // one kind's count never changed, or both always moved together
		if a, _ = fit(true, false); a <= 0 {
			a, b = fit(false, true)
		}
	}
	switch {
	case a < 0:
		a, b = fit(false, true)
	case b < 0:
		a, b = fit(true, false)
	}
	return max(a, 0), max(b, 0)
}

// TestSoak runs only with SOAK_DURATION (make soak: 1h; SOAK_DURATION=5m for a short one).
// SOAK_OUT names the directory for soak.csv (the samples), faults.csv and soak.md (the
// table); make soak plots soak.png from them with e2e/chaos/soak.gp.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("SOAK_DURATION"))
	if err != nil || d <= 0 {
		t.Skip("SOAK_DURATION not set (make soak)")
	}
	out := os.Getenv("SOAK_OUT")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	warm := min(max(d/12, time.Minute), 5*time.Minute)
	every := min(max(d/15, 40*time.Second), 4*time.Minute)
	ld := replicaLoad{perTopic: 3, egress: 2, pace: 50 * time.Millisecond}
	m := startMixed(t, ld)
	begin := time.Now()

	// The sampler.
	var samples []soakSample
	sampleStop := make(chan struct{})
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			for i, b := range m.replicas {
				m.mu.Lock()
				inc := m.incarn[i]
				m.mu.Unlock()
				g, in, eg, ok := b.load()
				rss := b.rssBytes()
				if rss <= 0 || !ok {
					continue // being restarted
				}
				samples = append(samples, soakSample{time.Now(), i, inc, rss, g, in, eg})
			}
			select {
			case <-sampleStop:
				return
			case <-tick.C:
			}
		}
	}()
	stopSampling := func() {
		select {
		case <-sampleStop:
		default:
			close(sampleStop)
		}
		<-sampleDone
	}
	defer stopSampling()

	// The faults: replica 1 lives the whole run (judged over all of it); replicas 2 and 3
	// are killed in turn. The topic grows once, a third of the way in.
	kinds := []string{"unload", "kill", "broker", "kill"}
	kills := 0
	grew := false
	for i := 0; time.Since(begin)+every < d; i++ {
		time.Sleep(every)
		if !grew && time.Since(begin) > d/3 && time.Since(begin)+partitionSettle+every < d {
			grew = true
			m.growPartitions(t)
			time.Sleep(partitionSettle)
		}
		switch kinds[i%len(kinds)] {
		case "unload":
			m.unload(t)
		case "kill":
			m.killReplica(t, 1+kills%2)
			kills++
		case "broker":
			m.restartBroker(t)
		}
		t.Logf("%s: %s", time.Since(begin).Round(time.Second), m.events[len(m.events)-1].what)
	}
	if rest := d - time.Since(begin); rest > 0 {
		time.Sleep(rest)
	}
	stopSampling()
	v := m.finish(t)

	// The faults, the table and the samples.
	var faults strings.Builder
	faults.WriteString("# minutes fault\n")
	m.mu.Lock()
	for _, e := range m.events {
		fmt.Fprintf(&faults, "%.3f %q\n", e.at.Sub(begin).Minutes(), e.what)
	}
	m.mu.Unlock()
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "Soak of %s (warm-up %s, a fault every %s, %d faults), %s.\n\n", d, warm, every, len(m.events), ld)
	tbl.WriteString("| replica (start) | samples | RSS level | RSS 2-min median range (raw) | RSS max dev | goroutines per ingress / egress stream | own goroutines level | own goroutines 2-min median range | own max dev | goroutines raw range | within ±10 % |\n")
	tbl.WriteString("|---|---:|---:|---|---:|---:|---:|---|---:|---|---|\n")
	allOK := true
	type proc struct{ replica, incarnation int }
	fitted := map[proc]soakJudged{}
	for i := range m.replicas {
		for inc := 1; ; inc++ {
			var ss []soakSample
			for _, s := range samples {
				if s.replica == i && s.incarnation == inc {
					ss = append(ss, s)
				}
			}
			if len(ss) == 0 {
				break
			}
			start := begin
			if inc > 1 {
				start = ss[0].at
			}
			j := judgeSoak(ss, start, warm)
			fitted[proc{i, inc}] = j
			name := fmt.Sprintf("r%d #%d (%.0f–%.0f min)", i+1, inc, ss[0].at.Sub(begin).Minutes(), ss[len(ss)-1].at.Sub(begin).Minutes())
			if !j.judged {
				fmt.Fprintf(&tbl, "| %s | %d | | | | | | | | | not judged (lived less than warm-up + 4 min) |\n", name, j.samples)
				continue
			}
			verdict := "yes"
			if !j.ok {
				verdict = "NO"
				allOK = false
			}
			fmt.Fprintf(&tbl, "| %s | %d | %.1f MiB | %.1f–%.1f MiB (%.1f–%.1f) | %.1f %% | %.1f / %.1f | %.0f | %.0f–%.0f | %.1f %% | %d–%d | %s |\n",
				name, j.samples, j.rssLevel, j.rssLo, j.rssHi, j.rssRawLo, j.rssRawHi, 100*j.rssDev,
				j.perIngress, j.perEgress, j.gLevel, j.gLo, j.gHi, 100*j.gDev, j.gRawLo, j.gRawHi, verdict)
		}
	}
	var csv strings.Builder
	csv.WriteString("# minutes replica incarnation rss_mib goroutines ingress_streams egress_streams own_goroutines\n")
	for _, s := range samples {
		j := fitted[proc{s.replica, s.incarnation}]
		own := float64(s.goroutines) - j.perIngress*float64(s.ingress) - j.perEgress*float64(s.egress)
		fmt.Fprintf(&csv, "%.3f r%d %d %.1f %d %d %d %.1f\n", s.at.Sub(begin).Minutes(), s.replica+1, s.incarnation, float64(s.rss)/(1<<20), s.goroutines, s.ingress, s.egress, own)
	}
	fmt.Fprintf(&tbl, "\nLoad: %d records receipted, %d present, lost %d, duplicated %d, never receipted %d, out of order %d; %d resends answered duplicate; egress: %d deliveries, %d records never acknowledged, %d left in the subscriptions; Java client read %d, Go client %d (%d disagreements).\n",
		v.receipted, v.present, v.lost, v.duplicated, v.unreceipted, v.order, v.dupAnswers, v.deliveries, v.egressUnacked, v.backlog, v.javaCount, v.goCount, v.javaDiff)
	for name, body := range map[string]string{"soak.csv": csv.String(), "faults.csv": faults.String(), "soak.md": tbl.String()} {
		if err := os.WriteFile(filepath.Join(out, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("\n" + tbl.String())
	if p := v.problems(); len(p) > 0 {
		t.Errorf("%s\ningress failures:\n%s\negress acknowledgement failures:\n%s", strings.Join(p, "; "), v.failures, v.ackFails)
	}
	if !allOK {
		t.Errorf("a replica's resident memory or own goroutines left ±10 %% of its level after warm-up (table above)")
	}
}
