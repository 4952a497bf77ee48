package k8s

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// prometheusRule is the part of the Prometheus Operator's PrometheusRule
// (monitoring.coreos.com/v1) the bridge uses; strict decoding refuses anything else.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec ruleSpec `json:"spec"`
}

type ruleSpec struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

const rulesFile = "monitoring/bridge-rules.yaml"

// alertRules decodes the PrometheusRule strictly.
func alertRules(t *testing.T) prometheusRule {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var r prometheusRule
	strict(t, rulesFile, raw, &r)
	if r.APIVersion != "monitoring.coreos.com/v1" || r.Kind != "PrometheusRule" {
		t.Fatalf("%s: %s %s is no PrometheusRule", rulesFile, r.APIVersion, r.Kind)
	}
	return r
}

// TestEveryAlertHasASummaryARunbookAndAPromtoolCase: each alert says what broke, points
// at a runbook section that exists in docs/operations.md, and is proved to fire by a
// case in bridge-rules.test.yaml; then promtool checks the rules and runs those cases.
func TestEveryAlertHasASummaryARunbookAndAPromtoolCase(t *testing.T) {
	r := alertRules(t)
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(ops), -1) {
		anchors[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(m[1]), " ", "-"))] = true
	}
	testRaw, err := os.ReadFile("monitoring/bridge-rules.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(testRaw, &cases); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, c := range cases.Tests {
		for _, a := range c.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	want := []string{"BridgeBrokerUnreachable", "BridgeMemoryBudgetNearLimit", "BridgeDeadLettersGrowing",
		"BridgePublishLatencyHigh", "BridgeConfigReloadFailing", "BridgeReadinessFlapping"}
	have := map[string]bool{}
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			have[rule.Alert] = true
			a := rule.Annotations
			if a["summary"] == "" || a["description"] == "" {
				t.Errorf("%s: no summary or description", rule.Alert)
			}
			doc, anchor, _ := strings.Cut(a["runbook"], "#")
			if doc != "docs/operations.md" || !anchors[anchor] {
				t.Errorf("%s: runbook %q is no section of docs/operations.md", rule.Alert, a["runbook"])
			}
			if rule.Labels["severity"] == "" {
				t.Errorf("%s: no severity", rule.Alert)
			}
			if !fires[rule.Alert] {
				t.Errorf("%s: no promtool case shows it firing", rule.Alert)
			}
		}
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("no alert %s", w)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed (Debian's prometheus package; .ci/run installs it)")
	}
	dir := t.TempDir()
	spec, err := yaml.Marshal(r.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bridge-rules.test.yaml"), testRaw, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "bridge-rules.test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestDashboardFiltersByNamespaceAndPodWithOneUnitPerPanel: the dashboard has namespace
// and pod variables, every panel query is restricted by both, and each panel has one
// unit (no override gives a series another, so no axis mixes messages and bytes).
func TestDashboardFiltersByNamespaceAndPodWithOneUnitPerPanel(t *testing.T) {
	raw, err := os.ReadFile("dashboards/bridge.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title       string `json:"title"`
			Type        string `json:"type"`
			FieldConfig struct {
				Defaults  map[string]any `json:"defaults"`
				Overrides []struct {
					Properties []struct {
						ID string `json:"id"`
					} `json:"properties"`
				} `json:"overrides"`
			} `json:"fieldConfig"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["namespace"] != "query" || vars["pod"] != "query" {
		t.Fatalf("variables %v: want namespace and pod queries", vars)
	}
	panels := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		panels++
		if u, _ := p.FieldConfig.Defaults["unit"].(string); u == "" {
			t.Errorf("panel %q has no unit", p.Title)
		}
		for _, o := range p.FieldConfig.Overrides {
			for _, prop := range o.Properties {
				if prop.ID == "unit" {
					t.Errorf("panel %q: an override sets a second unit", p.Title)
				}
			}
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `namespace=~"$namespace"`) || !strings.Contains(tg.Expr, `pod=~"$pod"`) {
				t.Errorf("panel %q: %s is not restricted to $namespace and $pod", p.Title, tg.Expr)
			}
		}
	}
	if panels < 20 {
		t.Fatalf("only %d panels", panels)
	}
}
