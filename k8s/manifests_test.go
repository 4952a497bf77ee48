// Package k8s holds no Go but this test: it decodes every manifest strictly into the
// Kubernetes API types and checks that the manifests agree with what the binary serves.
package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
)

// strict decodes YAML into v, refusing unknown fields.
func strict(t *testing.T, file string, doc []byte, v any) {
	t.Helper()
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels,omitempty"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewTag  string `json:"newTag"`
		NewName string `json:"newName,omitempty"`
	} `json:"images,omitempty"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
	ConfigMapGenerator []generator `json:"configMapGenerator,omitempty"`
	SecretGenerator    []generator `json:"secretGenerator,omitempty"`
}

type generator struct {
	Name     string   `json:"name"`
	Behavior string   `json:"behavior,omitempty"`
	Type     string   `json:"type,omitempty"`
	Files    []string `json:"files"`
}

// manifests decodes every file a kustomization names (resources and patches) by kind.
func manifests(t *testing.T, dir string) (k kustomization, deps []*appsv1.Deployment, cms []*corev1.ConfigMap, svcs []*corev1.Service) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	strict(t, dir+"/kustomization.yaml", raw, &k)
	if k.Kind != "Kustomization" {
		t.Fatalf("%s: kind %q", dir, k.Kind)
	}
	files := append([]string{}, k.Resources...)
	for _, p := range k.Patches {
		files = append(files, p.Path)
	}
	for _, g := range append(k.ConfigMapGenerator, k.SecretGenerator...) {
		for _, f := range g.Files {
			_, name, _ := strings.Cut(f, "=")
			if name == "" {
				name = f
			}
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Fatalf("%s: generator %s: %v", dir, g.Name, err)
			}
		}
	}
	for _, f := range files {
		path := filepath.Join(dir, f)
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			continue // another kustomization (the base), checked on its own
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(raw, []byte("\n---")) {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			switch meta.Kind {
			case "Deployment":
				d := &appsv1.Deployment{}
				strict(t, path, doc, d)
				deps = append(deps, d)
			case "ConfigMap":
				c := &corev1.ConfigMap{}
				strict(t, path, doc, c)
				cms = append(cms, c)
			case "Service":
				s := &corev1.Service{}
				strict(t, path, doc, s)
				svcs = append(svcs, s)
			default:
				t.Fatalf("%s: kind %q has no check", path, meta.Kind)
			}
		}
	}
	return k, deps, cms, svcs
}

// validate runs the configuration through the start-up path (parse, validate, compile);
// files it references are pointed at stand-ins, since they exist only in the pod.
func validate(t *testing.T, name, text string) (config.Config, map[string]string) {
	t.Helper()
	stand := t.TempDir()
	original := map[string]string{} // stand-in -> path in the pod
	for _, path := range []string{"/var/run/secrets/pulsar/token", "/etc/bridge-tls/tls.crt", "/etc/bridge-tls/tls.key", "/var/run/secrets/bridge-reader/token"} {
		if !strings.Contains(text, path) {
			continue
		}
		local := filepath.Join(stand, filepath.Base(filepath.Dir(path))+"-"+filepath.Base(path))
		if err := os.WriteFile(local, []byte("stand-in\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		text = strings.ReplaceAll(text, path, local)
		original[local] = path
	}
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("%s does not pass bridge validate: %v", name, err)
	}
	if _, err := mapping.Compile(cfg); err != nil {
		t.Fatalf("%s does not pass bridge validate: %v", name, err)
	}
	return cfg, original
}

func port(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return int32(n)
}

func bridgeContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.InitContainers {
		if c := &d.Spec.Template.Spec.InitContainers[i]; c.Name == "bridge" {
			return c
		}
	}
	t.Fatalf("%s has no bridge init container", d.Name)
	return nil
}

func containerPort(c *corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func TestBaseRunsTheBridgeAsAHardenedNativeSidecar(t *testing.T) {
	_, deps, cms, _ := manifests(t, "base")
	if len(deps) != 1 || len(cms) != 1 {
		t.Fatalf("%d deployments, %d config maps", len(deps), len(cms))
	}
	d := deps[0]
	cfg, _ := validate(t, "base/configmap.yaml", cms[0].Data["config.yaml"])
	c := bridgeContainer(t, d)
	spec := d.Spec.Template.Spec
	checks := []struct {
		ok   bool
		what string
	}{
		{c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways, "the bridge is an init container with restartPolicy: Always (a native sidecar)"},
		{strings.Join(c.Args, " ") == "run -config /etc/bridge/config.yaml", "the bridge runs its mounted configuration"},
		{c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet.Path == "/readyz" && c.ReadinessProbe.HTTPGet.Port.StrVal == "ops", "readiness on /readyz, ops port"},
		{c.LivenessProbe != nil && c.LivenessProbe.HTTPGet.Path == "/healthz" && c.LivenessProbe.HTTPGet.Port.StrVal == "ops", "liveness on /healthz, ops port"},
		{containerPort(c, "ops") == port(t, cfg.Listen.Ops), fmt.Sprintf("the ops port (%d) is listen.ops (%s)", containerPort(c, "ops"), cfg.Listen.Ops)},
		{!strings.HasPrefix(cfg.Listen.Ops, "127.0.0.1"), "listen.ops is reachable by the kubelet's probes (not loopback)"},
		{strings.HasPrefix(cfg.Listen.Data, "127.0.0.1"), "the data listener stays pod-local in the base"},
		{d.Spec.Template.Annotations["prometheus.io/port"] == strconv.Itoa(int(port(t, cfg.Listen.Ops))), "the scrape annotation names the ops port"},
		{spec.TerminationGracePeriodSeconds != nil && float64(*spec.TerminationGracePeriodSeconds) > cfg.Ingress.DrainTimeout.D().Seconds(),
			fmt.Sprintf("terminationGracePeriodSeconds (%s) exceeds ingress.drainTimeout (%s)", grace(spec.TerminationGracePeriodSeconds), cfg.Ingress.DrainTimeout.D())},
		{c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem, "read-only root filesystem"},
		{c.SecurityContext.AllowPrivilegeEscalation != nil && !*c.SecurityContext.AllowPrivilegeEscalation, "no privilege escalation"},
		{c.SecurityContext.Capabilities != nil && len(c.SecurityContext.Capabilities.Drop) == 1 && c.SecurityContext.Capabilities.Drop[0] == "ALL", "all capabilities dropped"},
		{spec.SecurityContext != nil && spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot, "runs as non-root"},
		{c.Resources.Requests.Cpu().MilliValue() > 0 && !c.Resources.Limits.Memory().IsZero(), "requests and a memory limit"},
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil
	}
	checks = append(checks, struct {
		ok   bool
		what string
	}{env["POD_NAME"] && env["POD_NAMESPACE"] && env["NODE_NAME"], "downward-API variables for telemetry"})
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("base: %s", ck.what)
		}
	}
}

func TestExampleOverlayExposesEgressSafely(t *testing.T) {
	k, deps, _, svcs := manifests(t, "overlays/example")
	raw, err := os.ReadFile("overlays/example/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, original := validate(t, "overlays/example/config.yaml", string(raw))
	if len(deps) != 1 || len(svcs) != 1 {
		t.Fatalf("%d deployment patches, %d services", len(deps), len(svcs))
	}
	c := bridgeContainer(t, deps[0])
	svc := svcs[0]
	if data := containerPort(c, "data"); data != port(t, cfg.Listen.Data) || svc.Spec.Ports[0].TargetPort.StrVal != "data" {
		t.Errorf("the Service targets port %q, the bridge's data port is %d, listen.data is %s", svc.Spec.Ports[0].TargetPort.StrVal, data, cfg.Listen.Data)
	}
	if cfg.Listen.TLS.CertFile == "" || len(cfg.Auth.Tokens) == 0 {
		t.Errorf("an exposed data listener needs TLS and tokens: tls %+v, %d tokens", cfg.Listen.TLS, len(cfg.Auth.Tokens))
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = true
	}
	for _, f := range []string{cfg.Listen.TLS.CertFile, cfg.Auth.Tokens[1].File, cfg.Pulsar.Token.File()} {
		if !mounts[filepath.Dir(original[f])] {
			t.Errorf("%s is not under a mounted volume (%v)", f, mounts)
		}
	}
	if svc.Spec.Selector["app.kubernetes.io/component"] != "scheduler" || k.Namespace == "" {
		t.Errorf("service selector %v, namespace %q", svc.Spec.Selector, k.Namespace)
	}
}

func grace(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10) + "s"
}
