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
// are sampled; after a warm-up, its memory and goroutines must stay within ±10 % of their
// level, and nothing may be lost.

const (
	sampleEvery   = 10 * time.Second
	soakTolerance = 0.10
	soakSmooth    = 30 // samples in the level and in the rolling median compared with it (5 min)
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
// fault or on a stream's reconnection (each reconnects through the balancer every 15 to
// 30 s, and a named stream's producers, one per partition it reaches, open with its
// request and close with it, so one sample's goroutine count moves by ten and more).
func judgeSoak(ss []soakSample, start time.Time, warm time.Duration) soakJudged {
	j := soakJudged{replica: ss[0].replica, incarnation: ss[0].incarnation, from: ss[0].at, to: ss[len(ss)-1].at, samples: len(ss)}
	var levelR, levelG []float64
	var after []soakSample
	for _, s := range ss {
		switch {
		case s.at.Before(start.Add(warm)):
		case s.at.Before(start.Add(warm + soakSmooth*sampleEvery)):
			levelR = append(levelR, float64(s.rss)/(1<<20))
			levelG = append(levelG, float64(s.goroutines))
			after = append(after, s)
		default:
			after = append(after, s)
		}
	}
	if len(levelR) < soakSmooth/2 || len(after) < len(levelR)+soakSmooth {
		return j // too short a life to judge
	}
	j.judged = true
	j.rssLevel, j.gLevel = median(levelR), median(levelG)
	j.rssLo, j.rssHi, j.gLo, j.gHi = j.rssLevel, j.rssLevel, j.gLevel, j.gLevel
	j.rssRawLo, j.rssRawHi = float64(after[0].rss)/(1<<20), float64(after[0].rss)/(1<<20)
	j.gRawLo, j.gRawHi = after[0].goroutines, after[0].goroutines
	for i := range after {
		r := float64(after[i].rss) / (1 << 20)
		j.rssRawLo, j.rssRawHi = min(j.rssRawLo, r), max(j.rssRawHi, r)
		j.gRawLo, j.gRawHi = min(j.gRawLo, after[i].goroutines), max(j.gRawHi, after[i].goroutines)
		if i+1 < soakSmooth {
			continue
		}
		var wr, wg []float64
		for _, s := range after[i+1-soakSmooth : i+1] {
			wr = append(wr, float64(s.rss)/(1<<20))
			wg = append(wg, float64(s.goroutines))
		}
		mr, mg := median(wr), median(wg)
		j.rssLo, j.rssHi = min(j.rssLo, mr), max(j.rssHi, mr)
		j.gLo, j.gHi = min(j.gLo, mg), max(j.gHi, mg)
	}
	dev := func(level, lo, hi float64) float64 { return max(hi-level, level-lo) / level }
	j.rssDev, j.gDev = dev(j.rssLevel, j.rssLo, j.rssHi), dev(j.gLevel, j.gLo, j.gHi)
	j.ok = j.rssDev <= soakTolerance && j.gDev <= soakTolerance
	return j
}

// streamRange is the fewest and the most streams (ingress and egress) the samples saw open.
func streamRange(ss []soakSample) (lo, hi int) {
	lo = ss[0].ingress + ss[0].egress
	hi = lo
	for _, s := range ss {
		lo, hi = min(lo, s.ingress+s.egress), max(hi, s.ingress+s.egress)
	}
	return lo, hi
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
	// The topic grows once, a third of the way into the warm-up, so every level is taken
	// on one shape of the load: more partitions hold more producers and consumers, and
	// their goroutines, for good. partitionSettle passes before the first fault.
	kinds := []string{"unload", "kill", "broker", "kill"}
	kills := 0
	time.Sleep(warm / 3)
	m.growPartitions(t)
	time.Sleep(partitionSettle)
	for i := 0; time.Since(begin)+every < d; i++ {
		time.Sleep(max(time.Duration(i+1)*every-time.Since(begin), 0))
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
	tbl.WriteString("| replica (start) | samples | RSS level | RSS 5-min median range (raw) | RSS max dev | goroutines level | goroutines 5-min median range (raw) | goroutines max dev | open streams (ingress + egress) | within ±10 % |\n")
	tbl.WriteString("|---|---:|---:|---|---:|---:|---|---:|---|---|\n")
	allOK := true
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
			name := fmt.Sprintf("r%d #%d (%.0f–%.0f min)", i+1, inc, ss[0].at.Sub(begin).Minutes(), ss[len(ss)-1].at.Sub(begin).Minutes())
			if !j.judged {
				fmt.Fprintf(&tbl, "| %s | %d | | | | | | | | not judged (lived less than warm-up + 10 min) |\n", name, j.samples)
				continue
			}
			verdict := "yes"
			if !j.ok {
				verdict = "NO"
				allOK = false
			}
			lo, hi := streamRange(ss)
			fmt.Fprintf(&tbl, "| %s | %d | %.1f MiB | %.1f–%.1f MiB (%.1f–%.1f) | %.1f %% | %.0f | %.0f–%.0f (%d–%d) | %.1f %% | %d–%d | %s |\n",
				name, j.samples, j.rssLevel, j.rssLo, j.rssHi, j.rssRawLo, j.rssRawHi, 100*j.rssDev,
				j.gLevel, j.gLo, j.gHi, j.gRawLo, j.gRawHi, 100*j.gDev, lo, hi, verdict)
		}
	}
	var csv strings.Builder
	csv.WriteString("# minutes replica incarnation rss_mib goroutines ingress_streams egress_streams\n")
	for _, s := range samples {
		fmt.Fprintf(&csv, "%.3f r%d %d %.1f %d %d %d\n", s.at.Sub(begin).Minutes(), s.replica+1, s.incarnation, float64(s.rss)/(1<<20), s.goroutines, s.ingress, s.egress)
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
		t.Errorf("a replica's resident memory or goroutines left ±10 %% of its level after warm-up (table above)")
	}
}
