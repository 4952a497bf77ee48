package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/e2e/faultproxy"
	"github.com/recordio-bridge/bridge/internal/logbuf"
	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry/telemetrytest"
)

// panelQuery is one query of the Grafana dashboard: a panel's target or a variable's.
type panelQuery struct{ panel, expr string }

// dashboardQueries reads every query of k8s/dashboards/bridge.json.
func dashboardQueries(t testing.TB) []panelQuery {
	t.Helper()
	raw, err := os.ReadFile("../k8s/dashboards/bridge.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var out []panelQuery
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			out = append(out, panelQuery{"variable " + v.Name, q["query"].(string)})
		}
	}
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Fatalf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, panelQuery{p.Title, tg.Expr})
		}
	}
	return out
}

// alertRule is one rule of k8s/monitoring/bridge-rules.yaml.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string      `json:"name"`
		Rules []alertRule `json:"rules"`
	} `json:"groups"`
}

// alertRules reads the groups of the PrometheusRule.
func alertRules(t testing.TB) ruleGroups {
	t.Helper()
	raw, err := os.ReadFile("../k8s/monitoring/bridge-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Spec ruleGroups `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Spec.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	return r.Spec
}

var metricName = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])((?:bridge|go|process)_[a-z0-9_]+)`)

// queriedMetrics is every metric name the dashboard and the alert rules query.
func queriedMetrics(t testing.TB) map[string]bool {
	t.Helper()
	exprs := []string{}
	for _, q := range dashboardQueries(t) {
		exprs = append(exprs, q.expr)
	}
	for _, g := range alertRules(t).Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	names := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricName.FindAllStringSubmatch(e, -1) {
			names[m[1]] = true
		}
	}
	return names
}

// promServer is a Prometheus server (Debian's prometheus binary) the test started.
type promServer struct {
	url string
}

// startPrometheus runs prometheus on a free port, scraping target every second as
// namespace e2e-mon, pod bridge-0, and evaluating rules every second.
func startPrometheus(t *testing.T, target string, rules ruleGroups) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not installed (Debian's prometheus package; .ci/run installs it)")
	}
	dir := t.TempDir()
	rb, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rb, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [rules.yaml]
scrape_configs:
  - job_name: bridge
    static_configs:
      - targets: [%q]
        labels: {namespace: e2e-mon, pod: bridge-0}
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := broker.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	var logs logbuf.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--enable-feature=exemplar-storage", "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	p := &promServer{url: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(p.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// api GETs a Prometheus HTTP API path and decodes its data.
func (p *promServer) api(path string, q url.Values, data any) error {
	resp, err := http.Get(p.url + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("%s: %v: %s", path, err, b)
	}
	if out.Status != "success" {
		return fmt.Errorf("%s %s: %s", path, q.Encode(), out.Error)
	}
	return json.Unmarshal(out.Data, data)
}

// series is how many series an instant query returns.
func (p *promServer) series(expr string) (int, error) {
	var d struct {
		Result []json.RawMessage `json:"result"`
	}
	err := p.api("/api/v1/query", url.Values{"query": {expr}}, &d)
	return len(d.Result), err
}

// firing is the alerts firing now, as alertname/label=value (the labels the rule adds
// beyond namespace, pod and severity).
func (p *promServer) firing() (map[string]bool, error) {
	var d struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", nil, &d); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, a := range d.Alerts {
		if a.State == "firing" {
			out[a.Labels["alertname"]] = true
		}
	}
	return out, nil
}

// grafana makes a dashboard query a Prometheus one: the variables get the scrape's
// labels and short windows; label_values becomes the series it lists.
func grafana(expr string) string {
	if m := regexp.MustCompile(`^label_values\((.*), (\w+)\)$`).FindStringSubmatch(expr); m != nil {
		expr = fmt.Sprintf("count by (%s) (%s)", m[2], m[1])
	}
	return strings.NewReplacer(`$namespace`, `e2e-mon`, `$pod`, `bridge-0`, `$__rate_interval`, `10s`, `$__range`, `1m`).Replace(expr)
}

// TestPrometheusScrapesTheBridgeAndItsAlertsFireAndClear: a real Prometheus scrapes a
// bridge (reaching the broker through a proxy) under a short load with client acks,
// nacks and dead letters. Every dashboard query returns data, the publish latency
// histogram's exemplars carry trace ids, and the alert rules (their "for" and windows
// shortened to the test's seconds) fire on their faults and clear when they end:
// dead letters, the broker refused at the proxy, and a refused configuration file.
func TestPrometheusScrapesTheBridgeAndItsAlertsFireAndClear(t *testing.T) {
	b := broker.Get(t)
	fp, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(b.URL, "pulsar://"))
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	topic := b.Topic(t, "mon")
	cfg := fmt.Sprintf(`
pulsar:
  url: pulsar://%s
memory:
  budget: 64MiB
ingress:
  maxRecordBytes: 2KiB
routes:
  - name: mon
    default: {topic: %s}
streams:
  - name: mon
    topics: [%s]
    position: earliest
    ack: client
    envelope: json
    type: shared
    retry: {initial: 10ms, maxDeliveries: 2}
    maxRate: 50
`, fp.Addr(), topic, topic)
	sink := telemetrytest.DropSink() // tracing on: exemplars and the span metrics
	defer sink.Close()
	p := startBridgeEnv(t, cfg, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"})

	// The rules as written, but holding for no time and looking back 20s, not minutes.
	rules := alertRules(t)
	window := regexp.MustCompile(`\[\d+m\]`)
	for gi := range rules.Groups {
		for ri := range rules.Groups[gi].Rules {
			r := &rules.Groups[gi].Rules[ri]
			r.For = "0s"
			r.Expr = window.ReplaceAllString(r.Expr, "[20s]")
		}
	}
	prom := startPrometheus(t, strings.TrimPrefix(p.OpsURL, "http://"), rules)

	// One of each failure ingress counts, and a reload.
	h := map[string]string{"Content-Type": "application/recordio", "Message-Content-Type": "application/json", "Accept": "application/recordio"}
	postOne(t, p.DataURL+"/v1/publish/mon", h, recordio.AppendRecord(nil, []byte(`{"big":"`+strings.Repeat("x", 4096)+`"}`)))
	postOne(t, p.DataURL+"/v1/publish/mon", h, []byte("x\n"))
	p.write(cfg + "\n")

	// The load: records published every 100ms; the reader acknowledges nine in ten and
	// nacks the tenth until it is dead-lettered (retry.maxDeliveries 2).
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	loadErr := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			var body []byte
			for j := range 10 {
				body = recordio.AppendRecord(body, []byte(fmt.Sprintf(`{"n":%d}`, i*10+j)))
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.DataURL+"/v1/publish/mon", bytes.NewReader(body))
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, err := h1Client.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					loadErr <- err
				}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				loadErr <- fmt.Errorf("publish: %d", resp.StatusCode)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/mon", map[string]string{"Message-Accept": "application/json"})
	streamID := resp.Header.Get("Stream-Id")
	go func() {
		defer wg.Done()
		defer resp.Body.Close()
		rd := recordio.NewReader(resp.Body)
		nacked := map[string]bool{}
		for seen := 0; ; seen++ {
			rec, err := rd.Next()
			if err != nil {
				if ctx.Err() == nil {
					loadErr <- fmt.Errorf("egress: %w", err)
				}
				return
			}
			var env struct {
				MessageID string `json:"messageId"`
			}
			if err := json.Unmarshal(rec, &env); err != nil {
				loadErr <- err
				return
			}
			verb := "ack"
			if nacked[env.MessageID] || seen%10 == 0 {
				verb, nacked[env.MessageID] = "nack", true
			}
			ids, _ := json.Marshal([]string{env.MessageID})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.DataURL+"/v1/streams/mon/"+verb, bytes.NewReader(ids))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Stream-Id", streamID)
			r, err := h1Client.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					loadErr <- err
				}
				return
			}
			r.Body.Close()
		}
	}()
	stopLoad := func() {
		stop()
		wg.Wait()
		select {
		case err := <-loadErr:
			t.Fatal(err)
		default:
		}
	}
	defer stopLoad()

	// Under the load: every dashboard query has data, the dead-letter alert fires.
	queries := dashboardQueries(t)
	deadline := time.Now().Add(45 * time.Second)
	var empty []string
	for {
		select {
		case err := <-loadErr:
			t.Fatal(err)
		default:
		}
		empty = empty[:0]
		for _, q := range queries {
			n, err := prom.series(grafana(q.expr))
			if err != nil {
				t.Fatalf("panel %q: %v", q.panel, err)
			}
			if n == 0 {
				empty = append(empty, fmt.Sprintf("%s: %s", q.panel, grafana(q.expr)))
			}
		}
		f, err := prom.firing()
		if err != nil {
			t.Fatal(err)
		}
		if len(empty) == 0 && f["BridgeDeadLettersGrowing"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the load: alerts firing %v; queries without data:\n%s\n%s", f, strings.Join(empty, "\n"), scrape(t, p.OpsURL))
		}
		time.Sleep(time.Second)
	}
	t.Logf("all %d dashboard queries return data; BridgeDeadLettersGrowing fires", len(queries))
	var ex []struct {
		Exemplars []struct {
			Labels map[string]string `json:"labels"`
		} `json:"exemplars"`
	}
	now := time.Now()
	if err := prom.api("/api/v1/query_exemplars", url.Values{"query": {"bridge_ingress_publish_duration_seconds_bucket"},
		"start": {fmt.Sprint(now.Add(-time.Minute).Unix())}, "end": {fmt.Sprint(now.Unix())}}, &ex); err != nil {
		t.Fatal(err)
	}
	if len(ex) == 0 || len(ex[0].Exemplars) == 0 || len(ex[0].Exemplars[0].Labels["trace_id"]) != 32 {
		t.Fatalf("no trace exemplars on the publish latency: %+v", ex)
	}
	stopLoad()

	// The faults: the broker refused at the proxy (its links cut), a bad file.
	fp.Set(faultproxy.Faults{Refuse: true})
	fp.Reset()
	p.write("ingress:\n  maxStreams: -1\n")
	waitAlerts(t, prom, 30*time.Second, []string{"BridgeBrokerUnreachable", "BridgeConfigReloadFailing"}, nil)
	fp.Heal()
	p.write(cfg)
	// Healed, and 20s without dead letters: nothing fires.
	waitAlerts(t, prom, 45*time.Second, nil, []string{"BridgeBrokerUnreachable", "BridgeConfigReloadFailing", "BridgeDeadLettersGrowing"})
}

// waitAlerts waits until every alert of on fires and none of off does.
func waitAlerts(t *testing.T, prom *promServer, within time.Duration, on, off []string) {
	t.Helper()
	deadline := time.Now().Add(within)
	begin := time.Now()
	for {
		f, err := prom.firing()
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for _, a := range on {
			ok = ok && f[a]
		}
		for _, a := range off {
			ok = ok && !f[a]
		}
		if ok {
			var names []string
			for a := range f {
				names = append(names, a)
			}
			sort.Strings(names)
			t.Logf("after %s: firing %v (want %v, not %v)", time.Since(begin).Round(100*time.Millisecond), names, on, off)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("within %s: firing %v, want %v and not %v", within, f, on, off)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
