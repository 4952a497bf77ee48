package main

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// stageOrder is the order of the bridge's stages along a record's way.
var stageOrder = []string{"read", "queue", "send", "order", "write"}

// histograms is bridge_ingress_stage_duration_seconds scraped from the bridge, by stage:
// cumulative counts by upper bound.
type histograms map[string]map[float64]float64

func scrapeStages(opsURL string) (histograms, error) {
	resp, err := http.Get(opsURL + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	h := histograms{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "bridge_ingress_stage_duration_seconds_bucket{") {
			continue
		}
		stage, le := label(l, "stage"), label(l, "le")
		sp := strings.LastIndexByte(l, ' ')
		n, err := strconv.ParseFloat(l[sp+1:], 64)
		if err != nil || stage == "" || le == "" {
			continue
		}
		bound := math.Inf(1)
		if le != "+Inf" {
			if bound, err = strconv.ParseFloat(le, 64); err != nil {
				continue
			}
		}
		if h[stage] == nil {
			h[stage] = map[float64]float64{}
		}
		h[stage][bound] += n
	}
	return h, sc.Err()
}

func label(l, name string) string {
	i := strings.Index(l, name+`="`)
	if i < 0 {
		return ""
	}
	rest := l[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// since is h minus before, stage by stage.
func (h histograms) since(before histograms) histograms {
	out := histograms{}
	for st, b := range h {
		out[st] = map[float64]float64{}
		for le, n := range b {
			out[st][le] = n - before[st][le]
		}
	}
	return out
}

// quantile is the upper bound of the bucket holding quantile q of a stage (an upper
// bound of the true value: the buckets are coarse).
func quantile(b map[float64]float64, q float64) string {
	var les []float64
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 || b[les[len(les)-1]] == 0 {
		return "-"
	}
	total := b[les[len(les)-1]]
	for _, le := range les {
		if b[le] >= q*total {
			if math.IsInf(le, 1) {
				return "> 30 s"
			}
			return fmt.Sprintf("≤ %g ms", le*1000)
		}
	}
	return "-"
}

// over is how many samples of a stage took more than bound seconds (a bucket bound).
func over(b map[float64]float64, bound float64) float64 {
	return b[math.Inf(1)] - b[bound]
}

func printStages(label string, h histograms) {
	fmt.Printf("| %s stage | sampled records | p50 | p99 | p99.9 | over 10 ms | over 25 ms |\n|---|---|---|---|---|---|---|\n", label)
	for _, st := range stageOrder {
		b := h[st]
		if b == nil {
			continue
		}
		fmt.Printf("| %s | %.0f | %s | %s | %s | %.0f | %.0f |\n", st, b[math.Inf(1)], quantile(b, 0.5), quantile(b, 0.99), quantile(b, 0.999), over(b, 0.01), over(b, 0.025))
	}
}
