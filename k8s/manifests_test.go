// Package k8s holds no Go but this test: it renders every kustomization with the
// kustomize API (what kubectl kustomize runs), decodes what comes out strictly into the
// Kubernetes API types and checks that the manifests agree with what the binary serves.
package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/app"
)

// minKubernetes is the oldest Kubernetes the manifests run on, as the Component's
// kustomization.yaml and the README state it: native sidecars (an init container with
// restartPolicy: Always) are on by default from 1.29.
const minKubernetes = "1.29"

const (
	component = "components/bridge-sidecar"
	optIn     = "recordio-bridge/sidecar" // the annotation the Component's patch targets, and the pod label it adds
	opsPort   = "bridge-ops"
	dataPort  = "bridge-data"
)

// strict decodes YAML into v, refusing unknown fields.
func strict(t *testing.T, what string, doc []byte, v any) {
	t.Helper()
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// rendered is a kustomization's output, decoded by kind.
type rendered struct {
	deps    []*appsv1.Deployment
	sts     []*appsv1.StatefulSet
	cms     map[string]*corev1.ConfigMap
	svcs    []*corev1.Service
	secrets map[string]*corev1.Secret
}

// render builds the kustomization in dir of fsys and decodes every resource strictly;
// a kind the test has no check for fails it. Every kustomization.yaml under dir is
// decoded strictly into kustomize's own type first.
func render(t *testing.T, fsys filesys.FileSystem, dir string) rendered {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := rendered{cms: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		what := dir + ": " + r.CurId().String()
		switch r.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			strict(t, what, doc, d)
			out.deps = append(out.deps, d)
		case "StatefulSet":
			s := &appsv1.StatefulSet{}
			strict(t, what, doc, s)
			out.sts = append(out.sts, s)
		case "ConfigMap":
			c := &corev1.ConfigMap{}
			strict(t, what, doc, c)
			out.cms[c.Name] = c
		case "Service":
			s := &corev1.Service{}
			strict(t, what, doc, s)
			out.svcs = append(out.svcs, s)
		case "Secret":
			s := &corev1.Secret{}
			strict(t, what, doc, s)
			out.secrets[s.Name] = s
		default:
			t.Fatalf("%s: kind %q has no check", what, r.GetKind())
		}
	}
	return out
}

// kustomizations decodes every kustomization.yaml of the repository's k8s/ strictly.
func TestEveryKustomizationDecodesStrictly(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "kustomization.yaml" {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var k types.Kustomization
		strict(t, path, raw, &k)
		if k.Kind != types.KustomizationKind && k.Kind != types.ComponentKind {
			t.Errorf("%s: kind %q", path, k.Kind)
		}
		n++
		return nil
	})
	if err != nil || n < 3 {
		t.Fatalf("%d kustomizations (%v)", n, err)
	}
}

// validate runs a configuration through `bridge validate` (start-up without binding);
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
	file := filepath.Join(stand, "config.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := app.Validate(file); err != nil {
		t.Fatalf("%s does not pass bridge validate: %v", name, err)
	}
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
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

func bridgeContainer(spec *corev1.PodSpec) *corev1.Container {
	for i := range spec.InitContainers {
		if c := &spec.InitContainers[i]; c.Name == "bridge" {
			return c
		}
	}
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

func grace(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10) + "s"
}

// checkSidecar checks a pod template the Component gave the bridge: a hardened native
// sidecar running the mounted configuration of a rendered ConfigMap, probed and scraped
// on the port its listen.ops names. It returns the configuration.
func checkSidecar(t *testing.T, what string, tmpl *corev1.PodTemplateSpec, r rendered) (*corev1.Container, config.Config, map[string]string) {
	t.Helper()
	spec := &tmpl.Spec
	c := bridgeContainer(spec)
	if c == nil {
		t.Fatalf("%s has no bridge init container", what)
	}
	var cmName string
	for _, v := range spec.Volumes {
		if v.Name == "bridge-config" && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm := r.cms[cmName]
	if cm == nil {
		t.Fatalf("%s: the bridge-config volume names ConfigMap %q, which is not rendered (%v)", what, cmName, r.cms)
	}
	cfg, original := validate(t, what+": ConfigMap "+cmName, cm.Data["config.yaml"])
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = true
		if m.Name == "bridge-config" && (m.MountPath != "/etc/bridge" || !m.ReadOnly) {
			t.Errorf("%s: bridge-config is mounted at %s (read-only %v), want /etc/bridge read-only", what, m.MountPath, m.ReadOnly)
		}
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	isTrue := func(b *bool) bool { return b != nil && *b }
	isFalse := func(b *bool) bool { return b != nil && !*b }
	probe := func(p *corev1.Probe, path string) bool {
		return p != nil && p.HTTPGet != nil && p.HTTPGet.Path == path && p.HTTPGet.Port.StrVal == opsPort
	}
	checks := []struct {
		ok   bool
		what string
	}{
		{c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways, "the bridge is an init container with restartPolicy: Always (a native sidecar)"},
		{strings.Join(c.Args, " ") == "run -config /etc/bridge/config.yaml", "the bridge runs its mounted configuration"},
		{mounts["/etc/bridge"], "the configuration is mounted at /etc/bridge"},
		{probe(c.StartupProbe, "/healthz"), "startup probe on /healthz, " + opsPort},
		{probe(c.LivenessProbe, "/healthz"), "liveness on /healthz, " + opsPort},
		{probe(c.ReadinessProbe, "/readyz"), "readiness on /readyz, " + opsPort},
		{containerPort(c, opsPort) == port(t, cfg.Listen.Ops), fmt.Sprintf("the %s port (%d) is listen.ops (%s)", opsPort, containerPort(c, opsPort), cfg.Listen.Ops)},
		{!strings.HasPrefix(cfg.Listen.Ops, "127.0.0.1"), "listen.ops is reachable by the kubelet's probes (not loopback)"},
		{tmpl.Labels[optIn] == "true", "the pod carries the label the PodMonitor selects"},
		{spec.TerminationGracePeriodSeconds != nil && float64(*spec.TerminationGracePeriodSeconds) > cfg.Ingress.DrainTimeout.D().Seconds(),
			fmt.Sprintf("terminationGracePeriodSeconds (%s) exceeds ingress.drainTimeout (%s)", grace(spec.TerminationGracePeriodSeconds), cfg.Ingress.DrainTimeout.D())},
		{isTrue(sc.ReadOnlyRootFilesystem), "read-only root filesystem"},
		{isFalse(sc.AllowPrivilegeEscalation), "no privilege escalation"},
		{isFalse(sc.Privileged), "not privileged"},
		{sc.Capabilities != nil && reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0, "all capabilities dropped, none added"},
		{isTrue(sc.RunAsNonRoot) && sc.RunAsUser != nil && *sc.RunAsUser != 0, "runs as non-root (on the container: the workload's pod securityContext is its own)"},
		{sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "seccomp RuntimeDefault"},
		{c.Resources.Requests.Cpu().MilliValue() > 0 && !c.Resources.Limits.Memory().IsZero(), "requests and a memory limit"},
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom != nil && (e.ValueFrom.FieldRef != nil || e.ValueFrom.ResourceFieldRef != nil)
	}
	checks = append(checks, struct {
		ok   bool
		what string
	}{env["POD_NAME"] && env["POD_NAMESPACE"] && env["NODE_NAME"] && env["POD_MEMORY_LIMIT"], "downward-API variables for telemetry and the memory limit"})
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("%s: %s", what, ck.what)
		}
	}
	return c, cfg, original
}

// memFS is an in-memory copy of the Component (at /k8s/components/bridge-sidecar) with
// the files of a user's kustomization at /app.
func memFS(t *testing.T, app map[string]string) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	entries, err := os.ReadDir(component)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(component, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := fsys.WriteFile(filepath.Join("/k8s", component, e.Name()), raw); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range app {
		if err := fsys.WriteFile(filepath.Join("/app", name), []byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	return fsys
}

// A user's own workload, as they wrote it: the Component must add the bridge to the two
// annotated ones without touching what is theirs, and leave the third alone.
const userWorkloads = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  annotations:
    recordio-bridge/sidecar: "true"
spec:
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop}
    spec:
      securityContext:
        fsGroup: 2000
      initContainers:
        - name: migrate
          image: shop-migrate:1
      containers:
        - name: shop
          image: shop:1
          ports: [{name: http, containerPort: 8000}]
          env: [{name: EVENTS_URL, value: "http://127.0.0.1:8080/v1/publish/events"}]
          volumeMounts: [{name: cache, mountPath: /cache}]
      volumes:
        - name: cache
          emptyDir: {}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ledger
  annotations:
    recordio-bridge/sidecar: "true"
spec:
  serviceName: ledger
  selector:
    matchLabels: {app: ledger}
  template:
    metadata:
      labels: {app: ledger}
    spec:
      containers:
        - name: ledger
          image: ledger:1
          volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec:
        accessModes: [ReadWriteOnce]
        resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: frontend
spec:
  selector:
    matchLabels: {app: frontend}
  template:
    metadata:
      labels: {app: frontend}
    spec:
      containers:
        - name: frontend
          image: frontend:1
`

func TestComponentAddsTheBridgeToAnyAnnotatedDeploymentOrStatefulSet(t *testing.T) {
	fsys := memFS(t, map[string]string{
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: shop\nnamePrefix: prod-\n" +
			"resources: [workloads.yaml]\ncomponents: [../k8s/" + component + "]\n",
		"workloads.yaml": userWorkloads,
	})
	r := render(t, fsys, "/app")
	// What the user wrote, decoded the same way, to compare with.
	var mine struct {
		deps map[string]*appsv1.Deployment
		sts  *appsv1.StatefulSet
	}
	mine.deps = map[string]*appsv1.Deployment{}
	for _, doc := range strings.Split(userWorkloads, "\n---\n") {
		if strings.Contains(doc, "kind: StatefulSet") {
			mine.sts = &appsv1.StatefulSet{}
			strict(t, "workloads.yaml", []byte(doc), mine.sts)
			continue
		}
		d := &appsv1.Deployment{}
		strict(t, "workloads.yaml", []byte(doc), d)
		mine.deps["prod-"+d.Name] = d
	}
	if len(r.deps) != 2 || len(r.sts) != 1 || len(r.cms) != 1 || r.cms["prod-bridge-config"] == nil {
		t.Fatalf("%d deployments, %d statefulsets, config maps %v", len(r.deps), len(r.sts), r.cms)
	}
	type pod struct {
		what string
		got  *corev1.PodTemplateSpec
		mine *corev1.PodTemplateSpec
	}
	var pods []pod
	for _, d := range r.deps {
		m := mine.deps[d.Name]
		if m == nil {
			t.Fatalf("unexpected Deployment %s", d.Name)
		}
		if d.Name == "prod-frontend" {
			if !reflect.DeepEqual(d.Spec, m.Spec) {
				t.Errorf("the Deployment without the annotation was changed:\n%+v\nwant\n%+v", d.Spec.Template.Spec, m.Spec.Template.Spec)
			}
			continue
		}
		pods = append(pods, pod{"Deployment " + d.Name, &d.Spec.Template, &m.Spec.Template})
	}
	pods = append(pods, pod{"StatefulSet " + r.sts[0].Name, &r.sts[0].Spec.Template, &mine.sts.Spec.Template})
	if !reflect.DeepEqual(r.sts[0].Spec.VolumeClaimTemplates, mine.sts.Spec.VolumeClaimTemplates) {
		t.Errorf("the StatefulSet's volumeClaimTemplates changed")
	}
	for _, p := range pods {
		checkSidecar(t, p.what, p.got, r)
		got, want := p.got.Spec, p.mine.Spec
		if !reflect.DeepEqual(got.Containers, want.Containers) {
			t.Errorf("%s: the workload's containers changed:\n%+v\nwant\n%+v", p.what, got.Containers, want.Containers)
		}
		if !reflect.DeepEqual(got.SecurityContext, want.SecurityContext) {
			t.Errorf("%s: the pod securityContext changed: %+v, want %+v", p.what, got.SecurityContext, want.SecurityContext)
		}
		for _, ic := range want.InitContainers {
			found := false
			for _, g := range got.InitContainers {
				found = found || reflect.DeepEqual(g, ic)
			}
			if !found {
				t.Errorf("%s: init container %s changed or lost", p.what, ic.Name)
			}
		}
		if len(got.InitContainers) != len(want.InitContainers)+1 {
			t.Errorf("%s: %d init containers, want the workload's %d and the bridge", p.what, len(got.InitContainers), len(want.InitContainers))
		}
		vols := map[string]corev1.Volume{}
		for _, v := range got.Volumes {
			vols[v.Name] = v
		}
		for _, v := range want.Volumes {
			if !reflect.DeepEqual(vols[v.Name], v) {
				t.Errorf("%s: volume %s changed or lost", p.what, v.Name)
			}
		}
		if len(got.Volumes) != len(want.Volumes)+1 {
			t.Errorf("%s: volumes %v, want the workload's and bridge-config", p.what, got.Volumes)
		}
		for k, v := range p.mine.Labels {
			if p.got.Labels[k] != v {
				t.Errorf("%s: pod label %s lost", p.what, k)
			}
		}
	}
}

func TestBaseRunsTheBridgeAsAHardenedNativeSidecar(t *testing.T) {
	r := render(t, filesys.MakeFsOnDisk(), "base")
	if len(r.deps) != 1 || len(r.cms) != 1 || len(r.sts) != 0 {
		t.Fatalf("%d deployments, %d config maps, %d statefulsets", len(r.deps), len(r.cms), len(r.sts))
	}
	d := r.deps[0]
	c, cfg, original := checkSidecar(t, "base", &d.Spec.Template, r)
	if !strings.HasPrefix(cfg.Listen.Data, "127.0.0.1") {
		t.Errorf("base: the data listener stays pod-local, listen.data is %s", cfg.Listen.Data)
	}
	if cfg.Routes[0].Name == "events" {
		t.Errorf("base: the Component's example configuration was not replaced by the scheduler's")
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = true
	}
	if f := cfg.Pulsar.Token.File(); f == "" || !mounts[filepath.Dir(original[f])] {
		t.Errorf("base: pulsar.token %s is not under a mounted volume (%v)", cfg.Pulsar.Token, mounts)
	}
	raw, err := os.ReadFile("base/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("name: bridge")) || bytes.Contains(raw, []byte("initContainers")) {
		t.Errorf("base/deployment.yaml carries the bridge itself; the Component adds it")
	}
}

func TestExampleOverlayExposesEgressSafely(t *testing.T) {
	r := render(t, filesys.MakeFsOnDisk(), "overlays/example")
	if len(r.deps) != 1 || len(r.svcs) != 1 {
		t.Fatalf("%d deployments, %d services", len(r.deps), len(r.svcs))
	}
	d, svc := r.deps[0], r.svcs[0]
	c, cfg, original := checkSidecar(t, "overlays/example", &d.Spec.Template, r)
	if data := containerPort(c, dataPort); data != port(t, cfg.Listen.Data) || svc.Spec.Ports[0].TargetPort.StrVal != dataPort {
		t.Errorf("the Service targets port %q, the bridge's %s port is %d, listen.data is %s", svc.Spec.Ports[0].TargetPort.StrVal, dataPort, data, cfg.Listen.Data)
	}
	if cfg.Listen.TLS.CertFile == "" || len(cfg.Auth.Tokens) == 0 {
		t.Fatalf("an exposed data listener needs TLS and tokens: tls %+v, %d tokens", cfg.Listen.TLS, len(cfg.Auth.Tokens))
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	secretOf := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secretOf[v.Name] = v.Secret.SecretName
		}
	}
	for _, f := range []string{cfg.Listen.TLS.CertFile, cfg.Auth.Tokens[1].File, cfg.Pulsar.Token.File()} {
		vol := mounts[filepath.Dir(original[f])]
		if vol == "" {
			t.Errorf("%s is not under a mounted volume (%v)", original[f], mounts)
		} else if s := r.secrets[secretOf[vol]]; s == nil || len(s.Data) == 0 {
			t.Errorf("%s: volume %s names Secret %q, which is not rendered", original[f], vol, secretOf[vol])
		}
	}
	if svc.Spec.Selector["app.kubernetes.io/component"] != "scheduler" || d.Namespace == "" || svc.Namespace != d.Namespace {
		t.Errorf("service selector %v, namespaces %q and %q", svc.Spec.Selector, svc.Namespace, d.Namespace)
	}
}

func TestPodMonitorScrapesTheBridgesOpsPort(t *testing.T) {
	raw, err := os.ReadFile("monitoring/podmonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pm monitoringv1.PodMonitor
	strict(t, "monitoring/podmonitor.yaml", raw, &pm)
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" || len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("%s %s with %d endpoints", pm.APIVersion, pm.Kind, len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	r := render(t, filesys.MakeFsOnDisk(), "base")
	tmpl := r.deps[0].Spec.Template
	for k, v := range pm.Spec.Selector.MatchLabels {
		if tmpl.Labels[k] != v {
			t.Errorf("the PodMonitor selects %s=%s; the Component's pods carry %v", k, v, tmpl.Labels)
		}
	}
	if len(pm.Spec.Selector.MatchLabels) == 0 || len(pm.Spec.Selector.MatchExpressions) != 0 {
		t.Errorf("selector %+v: want the Component's label", pm.Spec.Selector)
	}
	if ep.Port == nil || *ep.Port != opsPort || containerPort(bridgeContainer(&tmpl.Spec), *ep.Port) == 0 {
		t.Errorf("the PodMonitor scrapes port %v; the bridge's ops port is named %s", ep.Port, opsPort)
	}
	if ep.Path != "/metrics" {
		t.Errorf("the PodMonitor scrapes %q, the bridge serves /metrics", ep.Path)
	}
}

// since is the Kubernetes release from which each feature the manifests may use is on by
// default, with how to see it in a pod spec.
var since = []struct {
	feature, version string
	uses             func(spec *corev1.PodSpec) bool
}{
	{"native sidecars (initContainers[].restartPolicy: Always)", "1.29", func(s *corev1.PodSpec) bool {
		for _, c := range s.InitContainers {
			if c.RestartPolicy != nil {
				return true
			}
		}
		return false
	}},
	{"securityContext.appArmorProfile", "1.30", func(s *corev1.PodSpec) bool {
		for _, c := range append(append([]corev1.Container{}, s.InitContainers...), s.Containers...) {
			if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
				return true
			}
		}
		return s.SecurityContext != nil && s.SecurityContext.AppArmorProfile != nil
	}},
	{"the sleep action of lifecycle hooks", "1.30", func(s *corev1.PodSpec) bool {
		for _, c := range append(append([]corev1.Container{}, s.InitContainers...), s.Containers...) {
			if l := c.Lifecycle; l != nil && ((l.PreStop != nil && l.PreStop.Sleep != nil) || (l.PostStart != nil && l.PostStart.Sleep != nil)) {
				return true
			}
		}
		return false
	}},
}

func minor(t *testing.T, v string) int {
	t.Helper()
	major, m, ok := strings.Cut(v, ".")
	n, err := strconv.Atoi(m)
	if !ok || major != "1" || err != nil {
		t.Fatalf("version %q", v)
	}
	return n
}

// The minimum Kubernetes version is the newest release a feature the rendered pods use
// needs, and it is the one the Component and the README state.
func TestMinimumKubernetesVersionIsWhatTheManifestsNeedAndIsStated(t *testing.T) {
	need, why := 0, ""
	for _, dir := range []string{"base", "overlays/example"} {
		for _, d := range render(t, filesys.MakeFsOnDisk(), dir).deps {
			for _, f := range since {
				if f.uses(&d.Spec.Template.Spec) && minor(t, f.version) > need {
					need, why = minor(t, f.version), f.feature
				}
			}
		}
	}
	if got := fmt.Sprintf("1.%d", need); got != minKubernetes {
		t.Errorf("the manifests need Kubernetes %s (%s); minKubernetes says %s", got, why, minKubernetes)
	}
	stated := regexp.MustCompile(`Minimum Kubernetes version: (1\.\d+)`)
	raw, err := os.ReadFile(filepath.Join(component, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if m := stated.FindSubmatch(raw); m == nil || string(m[1]) != minKubernetes {
		t.Errorf("%s/kustomization.yaml states %q, want \"Minimum Kubernetes version: %s\"", component, m, minKubernetes)
	}
	doc := "../README.md"
	if _, err := os.Stat("../docs/kubernetes.md"); err == nil {
		doc = "../docs/kubernetes.md"
	}
	raw, err = os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`[Mm]inimum Kubernetes version[^0-9]{0,20}(1\.\d+)`).FindSubmatch(raw); m == nil || string(m[1]) != minKubernetes {
		t.Errorf("%s states %q, want the minimum Kubernetes version %s", doc, m, minKubernetes)
	}
}
