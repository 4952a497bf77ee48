package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// deploymentRun is how k8s/base runs the bridge container, translated into
// podman run flags, so the image tests run the image as the manifest says and follow it when
// it changes. A security setting the translation does not know fails the test instead of
// being left out.
type deploymentRun struct {
	Flags  []string          // user, groups, read-only root, capabilities, privileges, memory, env
	Args   []string          // the container's args (after the image's entrypoint)
	Mounts map[string]string // volume name -> mount path (all read-only: checked)
	UID    int64
	GID    int64
	Groups []int64 // supplementary groups (fsGroup)
}

type k8sEnv struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	ValueFrom *struct {
		FieldRef         *struct{ FieldPath string } `json:"fieldRef"`
		ResourceFieldRef *struct {
			Resource string `json:"resource"`
			Divisor  string `json:"divisor"`
		} `json:"resourceFieldRef"`
	} `json:"valueFrom"`
}

type k8sContainer struct {
	Name            string         `json:"name"`
	Args            []string       `json:"args"`
	Command         []string       `json:"command"`
	Env             []k8sEnv       `json:"env"`
	SecurityContext map[string]any `json:"securityContext"`
	Resources       struct {
		Limits map[string]string `json:"limits"`
	} `json:"resources"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	} `json:"volumeMounts"`
}

// bridgeDeployment reads the bridge container of k8s/base as kustomize renders it (the
// scheduler's Deployment, given the bridge by k8s/components/bridge-sidecar).
func bridgeDeployment(t *testing.T) deploymentRun {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	manifest := "k8s/base, rendered"
	render := exec.Command("go", "run", "./render", "base")
	render.Dir = filepath.Join(filepath.Dir(file), "..", "k8s")
	render.Stderr = os.Stderr
	raw, err := render.Output()
	if err != nil {
		t.Fatalf("rendering k8s/base: %v", err)
	}
	var d struct {
		Kind string `json:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext map[string]any `json:"securityContext"`
					InitContainers  []k8sContainer `json:"initContainers"`
					Containers      []k8sContainer `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatalf("%s: %v", manifest, err)
		}
		if d.Kind == "Deployment" {
			break
		}
	}
	if d.Kind != "Deployment" {
		t.Fatalf("%s has no Deployment", manifest)
	}
	pod := d.Spec.Template.Spec
	i := slices.IndexFunc(append(pod.InitContainers, pod.Containers...), func(c k8sContainer) bool { return c.Name == "bridge" })
	if i < 0 {
		t.Fatalf("%s has no container named bridge", manifest)
	}
	c := append(pod.InitContainers, pod.Containers...)[i]
	if len(c.Command) > 0 {
		t.Fatalf("%s: the bridge's command %q replaces the image's entrypoint; translate it here", manifest, c.Command)
	}
	run := deploymentRun{Args: c.Args, Mounts: map[string]string{}}
	fail := func(format string, args ...any) { t.Fatalf("%s: %s", manifest, fmt.Sprintf(format, args...)) }

	for _, k := range sortedKeys(pod.SecurityContext) {
		v := pod.SecurityContext[k]
		switch k {
		case "runAsNonRoot":
			if v != true {
				fail("pod runAsNonRoot %v", v)
			}
		case "runAsUser":
			run.UID = int64(number(t, k, v))
		case "runAsGroup":
			run.GID = int64(number(t, k, v))
		case "fsGroup":
			run.Groups = append(run.Groups, int64(number(t, k, v)))
		case "seccompProfile":
			// podman's default seccomp profile is the runtime's default.
			if m, _ := v.(map[string]any); m["type"] != "RuntimeDefault" {
				fail("seccompProfile %v: only RuntimeDefault is translated", v)
			}
		default:
			fail("pod securityContext.%s is not translated into podman flags", k)
		}
	}
	for _, k := range sortedKeys(c.SecurityContext) {
		v := c.SecurityContext[k]
		switch k {
		case "runAsNonRoot":
			if v != true {
				fail("runAsNonRoot %v", v)
			}
		case "runAsUser": // the container's setting wins over the pod's
			run.UID = int64(number(t, k, v))
		case "runAsGroup":
			run.GID = int64(number(t, k, v))
		case "seccompProfile":
			if m, _ := v.(map[string]any); m["type"] != "RuntimeDefault" {
				fail("seccompProfile %v: only RuntimeDefault is translated", v)
			}
		case "allowPrivilegeEscalation":
			if v != false {
				fail("allowPrivilegeEscalation %v", v)
			}
			run.Flags = append(run.Flags, "--security-opt", "no-new-privileges")
		case "readOnlyRootFilesystem":
			if v == true {
				// Kubernetes adds no writable tmpfs; podman does unless told not to.
				run.Flags = append(run.Flags, "--read-only", "--read-only-tmpfs=false")
			}
		case "privileged":
			if v != false {
				fail("privileged %v", v)
			}
		case "capabilities":
			m, _ := v.(map[string]any)
			for _, ck := range sortedKeys(m) {
				list, _ := m[ck].([]any)
				for _, capability := range list {
					switch ck {
					case "drop":
						run.Flags = append(run.Flags, "--cap-drop", fmt.Sprint(capability))
					case "add":
						run.Flags = append(run.Flags, "--cap-add", fmt.Sprint(capability))
					default:
						fail("capabilities.%s", ck)
					}
				}
			}
		default:
			fail("the bridge's securityContext.%s is not translated into podman flags", k)
		}
	}
	if run.UID == 0 || run.GID == 0 {
		fail("runAsUser/runAsGroup (%d:%d) must be set and not root", run.UID, run.GID)
	}
	run.Flags = append(run.Flags, "--user", fmt.Sprintf("%d:%d", run.UID, run.GID))
	for _, g := range run.Groups {
		// The kubelet gives the container the fsGroup as a supplementary group.
		run.Flags = append(run.Flags, "--group-add", strconv.FormatInt(g, 10))
	}
	memory := int64(0)
	for k, v := range c.Resources.Limits {
		switch k {
		case "memory":
			memory = quantity(t, v)
			run.Flags = append(run.Flags, "--memory", strconv.FormatInt(memory, 10))
		default:
			fail("resources.limits.%s is not translated", k)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			run.Flags = append(run.Flags, "-e", e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil:
			// Downward API: the pod's identity, made up here.
			run.Flags = append(run.Flags, "-e", e.Name+"=image-test-"+strings.ReplaceAll(e.ValueFrom.FieldRef.FieldPath, ".", "-"))
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && memory > 0:
			div := int64(1)
			if s := e.ValueFrom.ResourceFieldRef.Divisor; s != "" {
				div = quantity(t, s)
			}
			run.Flags = append(run.Flags, "-e", fmt.Sprintf("%s=%d", e.Name, memory/div))
		default:
			fail("env %s: its valueFrom is not translated", e.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			fail("volume %s is mounted read-write; the image tests mount every volume read-only", m.Name)
		}
		run.Mounts[m.Name] = m.MountPath
	}
	return run
}

// volumes returns the -v flags for the Deployment's mounts from host directories by volume
// name; a mount without one fails the test.
func (r deploymentRun) volumes(t *testing.T, dirs map[string]string) []string {
	t.Helper()
	var flags []string
	for _, name := range sortedKeys(r.Mounts) {
		mp := r.Mounts[name]
		dir, ok := dirs[name]
		if !ok {
			t.Fatalf("the Deployment mounts volume %s at %s; the test gives it no directory", name, mp)
		}
		flags = append(flags, "-v", dir+":"+mp+":ro")
	}
	for name := range dirs {
		if _, ok := r.Mounts[name]; !ok {
			t.Fatalf("the test has a directory for volume %s, which the Deployment does not mount", name)
		}
	}
	return flags
}

// mountPath is where the Deployment mounts a volume.
func (r deploymentRun) mountPath(t *testing.T, name string) string {
	t.Helper()
	mp, ok := r.Mounts[name]
	if !ok {
		t.Fatalf("the Deployment does not mount volume %s", name)
	}
	return mp
}

// configFile is the file the container's args name with -config; it must be in a mounted volume.
func (r deploymentRun) configFile(t *testing.T) (volume, name string) {
	t.Helper()
	i := slices.Index(r.Args, "-config")
	if i < 0 || i+1 >= len(r.Args) {
		t.Fatalf("the bridge's args %q name no -config file", r.Args)
	}
	for v, mp := range r.Mounts {
		if path.Dir(r.Args[i+1]) == mp {
			return v, path.Base(r.Args[i+1])
		}
	}
	t.Fatalf("the -config file %s is in none of the mounted volumes %v", r.Args[i+1], r.Mounts)
	return "", ""
}

func number(t *testing.T, key string, v any) float64 {
	t.Helper()
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("securityContext.%s: %v is not a number", key, v)
	}
	return f
}

// quantity parses the Kubernetes quantities the manifest uses (plain bytes, Ki, Mi, Gi).
func quantity(t *testing.T, s string) int64 {
	t.Helper()
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if strings.HasSuffix(s, suffix) {
			s, mult = strings.TrimSuffix(s, suffix), m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("quantity %q: only integers with Ki, Mi or Gi are translated", s)
	}
	return n * mult
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
