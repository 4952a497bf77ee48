package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/logbuf"
	"github.com/recordio-bridge/bridge/recordio"
	"google.golang.org/protobuf/encoding/protowire"
)

// The container image tests run the image that `make image-test` built (BRIDGE_IMAGE) with
// podman, the way k8s/base runs the bridge: read-only root filesystem, user
// and group 65532, no capabilities, no privilege escalation, the configuration and the Pulsar
// token mounted read-only from kubelet-style directories. `make e2e` does not build the image,
// so there they are skipped; under `make image-test` a podman that cannot run fails them.

// imageUnderTest returns the image reference, or skips when no image was built for this run.
func imageUnderTest(t *testing.T) string {
	t.Helper()
	img := os.Getenv("BRIDGE_IMAGE")
	if img == "" {
		t.Skip("BRIDGE_IMAGE is not set: `make image-test` builds the image and runs these tests")
	}
	return img
}

// podman runs podman with the global flags of BRIDGE_PODMAN (storage driver, runtime, cgroup
// manager: the Makefile's PODMAN) and returns its standard output.
func podman(t testing.TB, args ...string) string {
	t.Helper()
	out, err := podmanCmd(args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("podman %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

func podmanCmd(args ...string) *exec.Cmd {
	base := strings.Fields(os.Getenv("BRIDGE_PODMAN"))
	if len(base) == 0 {
		base = []string{"podman"}
	}
	return exec.Command(base[0], append(base[1:], args...)...)
}

// ociImage is what the tests read of an image's configuration.
type ociImage struct {
	Created string `json:"created"`
	Config  struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		Env          []string            `json:"Env"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// savedImage is an image written out by `podman save --format oci-dir`.
type savedImage struct {
	dir      string
	manifest struct {
		Config ociDescriptor   `json:"config"`
		Layers []ociDescriptor `json:"layers"`
	}
	config ociImage
}

func saveImage(t *testing.T, img string) *savedImage {
	t.Helper()
	s := &savedImage{dir: filepath.Join(t.TempDir(), "oci")}
	podman(t, "save", "--format", "oci-dir", "-o", s.dir, img)
	var index struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	s.readJSON(t, filepath.Join(s.dir, "index.json"), &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(index.Manifests))
	}
	s.readJSON(t, s.blob(index.Manifests[0].Digest), &s.manifest)
	s.readJSON(t, s.blob(s.manifest.Config.Digest), &s.config)
	return s
}

func (s *savedImage) blob(digest string) string {
	return filepath.Join(s.dir, "blobs", strings.Replace(digest, ":", string(filepath.Separator), 1))
}

func (s *savedImage) readJSON(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// layerEntry is one file of a layer, with its content's SHA-256 for regular files.
type layerEntry struct {
	hdr    *tar.Header
	sha256 string
}

// layer reads layer i (a tar, gzip-compressed or not) into its entries, keyed by clean path.
func (s *savedImage) layer(t *testing.T, i int) map[string]layerEntry {
	t.Helper()
	f, err := os.Open(s.blob(s.manifest.Layers[i].Digest))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	out := map[string]layerEntry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		e := layerEntry{hdr: h}
		if h.Typeflag == tar.TypeReg {
			sum := sha256.New()
			if _, err := io.Copy(sum, tr); err != nil {
				t.Fatal(err)
			}
			e.sha256 = hex.EncodeToString(sum.Sum(nil))
		}
		out[path.Clean("/"+h.Name)] = e
	}
}

func fileSHA256(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// caBundle is the CA bundle the image was built with (k8s/image/build.sh's default).
func caBundle() string {
	if f := os.Getenv("CA_BUNDLE"); f != "" {
		return f
	}
	return "/etc/ssl/certs/ca-certificates.crt"
}

// TestImageHoldsOnlyTheBinaryAndTheCABundle reads the image as a registry would receive it:
// one layer with exactly the static binary `make build` made and the build host's CA bundle,
// owned by root, every timestamp the commit's; a numeric non-root user, the entrypoint and the
// manifests' arguments, and the OCI labels. The binary runs in it (nothing else is there to
// run: it is static).
func TestImageHoldsOnlyTheBinaryAndTheCABundle(t *testing.T) {
	img := imageUnderTest(t)
	s := saveImage(t, img)
	c := s.config
	if c.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (the manifests' runAsUser and runAsGroup)", c.Config.User)
	}
	if !slices.Equal(c.Config.Entrypoint, []string{"/bridge"}) || !slices.Equal(c.Config.Cmd, bridgeDeployment(t).Args) {
		t.Errorf("entrypoint %q, cmd %q; want /bridge and the Deployment's args %q", c.Config.Entrypoint, c.Config.Cmd, bridgeDeployment(t).Args)
	}
	for _, p := range []string{"8080/tcp", "9090/tcp"} {
		if _, ok := c.Config.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.Config.ExposedPorts)
		}
	}
	labels := c.Config.Labels
	for _, k := range []string{"version", "revision", "source", "created"} {
		if labels["org.opencontainers.image."+k] == "" {
			t.Errorf("label org.opencontainers.image.%s missing: %v", k, labels)
		}
	}
	created, err := time.Parse(time.RFC3339, labels["org.opencontainers.image.created"])
	if err != nil {
		t.Fatalf("created label: %v", err)
	}
	if ct, err := time.Parse(time.RFC3339, c.Created); err != nil || !ct.Equal(created) {
		t.Errorf("image created %q, label %s: both must be SOURCE_DATE_EPOCH", c.Created, created)
	}
	if len(s.manifest.Layers) != 1 || len(c.RootFS.DiffIDs) != 1 {
		t.Fatalf("%d layers (%d diff ids), want 1", len(s.manifest.Layers), len(c.RootFS.DiffIDs))
	}

	files := s.layer(t, 0)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"/", "/bridge", "/etc", "/etc/ssl", "/etc/ssl/certs", "/etc/ssl/certs/ca-certificates.crt"}
	if got := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "/" }); !slices.Equal(got, want[1:]) {
		t.Fatalf("the layer holds %q, want %q", names, want)
	}
	for _, n := range names {
		h := files[n].hdr
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want root: the bridge (65532) must not be able to change it", n, h.Uid, h.Gid)
		}
		if !h.ModTime.Equal(created) {
			t.Errorf("%s modified %s, want %s (SOURCE_DATE_EPOCH)", n, h.ModTime.UTC(), created)
		}
	}
	if m := files["/bridge"].hdr.Mode & 0o7777; m != 0o755 {
		t.Errorf("/bridge mode %o, want 755", m)
	}
	if m := files["/etc/ssl/certs/ca-certificates.crt"].hdr.Mode & 0o7777; m != 0o644 {
		t.Errorf("CA bundle mode %o, want 644", m)
	}
	if got, want := files["/bridge"].sha256, fileSHA256(t, bridgeBin(t)); got != want {
		t.Errorf("/bridge is not the binary `make build` made (%s): sha256 %s, want %s", bridgeBin(t), got, want)
	}
	if got, want := files["/etc/ssl/certs/ca-certificates.crt"].sha256, fileSHA256(t, caBundle()); got != want {
		t.Errorf("the CA bundle is not %s: sha256 %s, want %s", caBundle(), got, want)
	}

	out := podman(t, append(append([]string{"run", "--rm"}, sandboxRunFlags()...), img, "version")...)
	if !strings.HasPrefix(out, "bridge "+labels["org.opencontainers.image.version"]+" ") {
		t.Errorf("`bridge version` in the image says %q; the version label is %q", out, labels["org.opencontainers.image.version"])
	}
	t.Logf("%s: 1 layer, %d bytes of files, %d bytes as saved (%s); %s", img,
		files["/bridge"].hdr.Size+files["/etc/ssl/certs/ca-certificates.crt"].hdr.Size, s.manifest.Layers[0].Size, s.manifest.Layers[0].MediaType, out)
}

// TestImageIsReproducible builds the binary again with `make build` from the same sources and
// version, and the image again from it with the same CA bundle, labels and SOURCE_DATE_EPOCH:
// the binary must be the same bytes, and the image id (its configuration's digest) and the
// manifest digest the ones of the image under test.
func TestImageIsReproducible(t *testing.T) {
	img := imageUnderTest(t)
	var labels map[string]string
	if err := json.Unmarshal([]byte(podman(t, "image", "inspect", "--format", "{{json .Labels}}", img)), &labels); err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse(time.RFC3339, labels["org.opencontainers.image.created"])
	if err != nil {
		t.Fatalf("created label: %v", err)
	}
	version := labels["org.opencontainers.image.version"]
	bin := filepath.Join(t.TempDir(), "bridge")
	build := exec.Command("make", "-s", "build", "BIN="+bin, "VERSION="+version)
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	if got, want := fileSHA256(t, bin), fileSHA256(t, bridgeBin(t)); got != want {
		t.Fatalf("make build VERSION=%s twice gave two binaries (sha256 %s and %s): the sources changed in between, or the build is not reproducible", version, want, got)
	}

	again := strings.SplitN(img, ":", 2)[0] + ":rebuilt-" + broker.Name("r")
	cmd := exec.Command("k8s/image/build.sh")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "IMAGE="+again, "BIN="+bin, "IMAGE_BUILDER=buildah", "CA_BUNDLE="+caBundle(),
		"VERSION="+version, "REVISION="+labels["org.opencontainers.image.revision"],
		"SOURCE_DATE_EPOCH="+strconv.FormatInt(created.Unix(), 10))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("k8s/image/build.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = podmanCmd("rmi", again).Run() })
	first := podman(t, "image", "inspect", "--format", "{{.Id}} {{.Digest}}", img)
	second := podman(t, "image", "inspect", "--format", "{{.Id}} {{.Digest}}", again)
	if first != second {
		t.Fatalf("the same binary built twice gave two images:\n  %s %s\n  %s %s", img, first, again, second)
	}
	t.Logf("binary and image rebuilt as %s: id and digest %s", again, first)
}

// sandboxRunFlags are the podman run flags this machine kind needs: the sandbox refuses to
// raise resource limits, so the container gets the test's own open-files limit and a modest
// process limit instead of podman's defaults (which are above them).
func sandboxRunFlags() []string {
	var rl syscall.Rlimit
	nofile := uint64(4096)
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < nofile {
		nofile = rl.Cur
	}
	return []string{"--network", "host",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile, nofile), "--ulimit", "nproc=4096:4096"}
}

// container is the bridge running in the image under test, in the foreground of a podman
// process whose output is kept.
type container struct {
	name    string
	cmd     *exec.Cmd
	logs    *logbuf.Buffer
	exited  chan struct{}
	exitErr error
	DataURL string
	OpsURL  string
}

// runImage starts the image the way k8s/base runs the bridge (its security
// context, memory limit, environment, volume mounts from the host directories given by volume
// name, and args), with extra podman flags.
func runImage(t *testing.T, img string, dataPort, opsPort int, volumes map[string]string, extra ...string) *container {
	t.Helper()
	dep := bridgeDeployment(t)
	c := &container{name: broker.Name("bridge-image-test"), logs: &logbuf.Buffer{}, exited: make(chan struct{}),
		DataURL: fmt.Sprintf("http://127.0.0.1:%d", dataPort), OpsURL: fmt.Sprintf("http://127.0.0.1:%d", opsPort)}
	args := append([]string{"run", "--rm", "--name", c.name}, dep.Flags...)
	args = append(args, sandboxRunFlags()...)
	args = append(args, dep.volumes(t, volumes)...)
	args = append(args, extra...)
	args = append(append(args, img), dep.Args...)
	c.cmd = podmanCmd(args...)
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("podman: %v", err)
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = podmanCmd("rm", "-f", "-t", "0", c.name).Run()
			select {
			case <-c.exited:
			case <-time.After(time.Minute):
				_ = c.cmd.Process.Kill()
				<-c.exited
			}
		}
		if t.Failed() {
			t.Logf("podman run %s:\n%s", strings.Join(args, " "), tail(c.logs.String(), 60))
		}
	})
	return c
}

// get answers the status and body of GET url, or 0 and the error.
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitOps polls endpoint on the ops listener until it answers want, the container exits, or a
// minute passes (the first start copies the image's layer).
func (c *container) waitOps(t *testing.T, endpoint string, want int) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := get(c.OpsURL + endpoint)
		if code == want {
			return body
		}
		select {
		case <-c.exited:
			t.Fatalf("the container exited (%v) before %s answered %d", c.exitErr, endpoint, want)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s answered %d %q, not %d, for a minute", endpoint, code, body, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pid is the bridge's process id on the host.
func (c *container) pid(t *testing.T) int {
	t.Helper()
	p, err := strconv.Atoi(podman(t, "inspect", "--format", "{{.State.Pid}}", c.name))
	if err != nil || p <= 0 {
		t.Fatalf("container %s has no process: %d %v", c.name, p, err)
	}
	return p
}

// terminate sends SIGTERM to the bridge (PID 1 of the container) and waits at most wait for
// podman to exit; it returns the container's exit code.
func (c *container) terminate(t *testing.T, wait time.Duration) int {
	t.Helper()
	start := time.Now()
	podman(t, "kill", "--signal", "TERM", c.name)
	select {
	case <-c.exited:
	case <-time.After(wait):
		t.Fatalf("the container still runs %s after SIGTERM", wait)
	}
	t.Logf("exited %s after SIGTERM: %v", time.Since(start).Round(time.Millisecond), c.exitErr)
	return c.cmd.ProcessState.ExitCode()
}

// checkRunsLikeTheManifest reads the bridge's process from the host's /proc: the
// Deployment's user, group and supplementary groups, no capabilities in any set, no_new_privs,
// a seccomp filter, and the root filesystem and every volume mounted read-only.
func checkRunsLikeTheManifest(t *testing.T, pid int, dep deploymentRun) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	flags := strings.Join(dep.Flags, " ")
	if !strings.Contains(flags, "--cap-drop ALL") || strings.Contains(flags, "--cap-add") ||
		!strings.Contains(flags, "no-new-privileges") || !strings.Contains(flags, "--read-only ") {
		t.Fatalf("the Deployment no longer drops every capability, forbids privilege escalation and mounts the root read-only (%s): say here what the process must look like instead", flags)
	}
	var groups []string
	for _, g := range dep.Groups {
		groups = append(groups, strconv.FormatInt(g, 10))
	}
	uid, gid := strconv.FormatInt(dep.UID, 10), strconv.FormatInt(dep.GID, 10)
	want := map[string]string{
		"Uid": strings.Repeat(uid+" ", 3) + uid, "Gid": strings.Repeat(gid+" ", 3) + gid, "Groups": strings.Join(groups, " "),
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("/proc/%d/status %s: %q, want %q", pid, k, fields[k], v)
		}
	}
	mountinfo, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	opts := map[string]string{}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 {
			opts[f[4]] = f[5] // mount point -> per-mount options (the last mount on a point wins)
		}
	}
	mounts := []string{"/"}
	for _, mp := range dep.Mounts {
		mounts = append(mounts, mp)
	}
	for _, mp := range mounts {
		o, ok := opts[mp]
		if !ok {
			t.Errorf("nothing mounted on %s in the container", mp)
			continue
		}
		if !slices.Contains(strings.Split(o, ","), "ro") {
			t.Errorf("%s is mounted %s in the container, want ro", mp, o)
		}
	}
}

// volumeDir makes a directory the container user can read, laid out like a kubelet
// ConfigMap or Secret volume: name -> ..data/name, ..data -> ..gen_001.
func volumeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	swapGeneration(t, dir, 1, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestImageRunsAsTheManifestsRunIt: the image, run as the Deployment runs it (read-only root
// filesystem, user 65532, no capabilities, config and token mounted read-only), answers its
// probes, sends the Pulsar token from the mounted file, receipts a RecordIO stream that the
// official client reads back and a GET stream delivers, applies a ConfigMap-style ..data swap
// without a restart, and on SIGTERM ends the open GET and POST streams (the latter with its
// summary) and exits 0 within its drain timeout.
func TestImageRunsAsTheManifestsRunIt(t *testing.T) {
	img := imageUnderTest(t)
	b := broker.Get(t)
	brokerURL, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	sniffer := startConnectSniffer(t, brokerURL.Host)
	first, second := b.Topic(t, "image"), b.Topic(t, "image-reloaded")
	ports, err := broker.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	const drainTimeout = 10 * time.Second
	dep := bridgeDeployment(t)
	cfgVolume, cfgName := dep.configFile(t)
	tokenFile := path.Join(dep.mountPath(t, "pulsar-token"), "token") // the Secret's key: k8s/base/kustomization.yaml
	config := func(topic string) string {
		return fmt.Sprintf(`listen:
  data: 127.0.0.1:%d
  ops: 127.0.0.1:%d
pulsar:
  url: pulsar://%s
  token: file:%s
ingress:
  drainTimeout: %s
routes:
  - name: events
    default: {topic: %s}
streams:
  - name: events
    topics: [%s]
    position: earliest
`, ports[0], ports[1], sniffer.Addr(), tokenFile, drainTimeout, topic, first)
	}
	tokenBytes := make([]byte, 24)
	if _, err := rand.Read(tokenBytes); err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(tokenBytes)
	cfgDir := volumeDir(t, map[string]string{cfgName: config(first)})
	tokenDir := volumeDir(t, map[string]string{"token": token + "\n"})

	c := runImage(t, img, ports[0], ports[1], map[string]string{cfgVolume: cfgDir, "pulsar-token": tokenDir})
	c.waitOps(t, "/healthz", 200)
	c.waitOps(t, "/readyz", 200)
	pid := c.pid(t)
	checkRunsLikeTheManifest(t, pid, dep)

	auths := sniffer.Auths()
	if len(auths) == 0 {
		t.Fatal("no connection reached the broker through the sniffer")
	}
	for _, a := range auths {
		if a.Err != "" || a.Method != "token" || a.Data != token {
			t.Fatalf("a CONNECT carried %+v, want the token method with the mounted file's token", a)
		}
	}

	// The kubelet rotates a Secret the way it updates a ConfigMap; the connections made after
	// that (here: after the relay cut the open ones) carry the new token, without a restart.
	if _, err := rand.Read(tokenBytes); err != nil {
		t.Fatal(err)
	}
	rotated := hex.EncodeToString(tokenBytes)
	swapGeneration(t, tokenDir, 2, map[string]string{"token": rotated + "\n"})
	if err := os.RemoveAll(filepath.Join(tokenDir, "..gen_001")); err != nil {
		t.Fatal(err)
	}
	before := sniffer.Cut()
	deadline := time.Now().Add(time.Minute)
	for {
		// /readyz dials the service URL again once the bridge has seen the cut connection close.
		_, body := get(c.OpsURL + "/readyz")
		if len(sniffer.Auths()) > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new connection through the relay within a minute of cutting the old ones; /readyz: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.waitOps(t, "/readyz", 200)
	after := sniffer.Auths()[before:]
	for _, a := range after {
		if a.Err != "" || a.Method != "token" || a.Data != rotated {
			t.Fatalf("after the Secret's rotation a CONNECT carried %+v, want the new token %s", a, rotated)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := egressGet(t, ctx, c.DataURL+"/v1/streams/events", nil)
	defer out.Body.Close()
	if out.StatusCode != 200 {
		t.Fatalf("GET stream: %s", out.Status)
	}

	records := [][]byte{rec(0), rec(1), rec(2)}
	st := openStream(t, h1Client, c.DataURL+"/v1/publish/events", nil)
	if err := st.send(records...); err != nil {
		t.Fatal(err)
	}
	receipts, sum, err := st.finish(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(receipts) != len(records) || sum.Published != int64(len(records)) || sum.Status != 200 {
		t.Fatalf("receipts %+v, summary %+v", receipts, sum)
	}
	for i, r := range receipts {
		if r.Seq != int64(i) || r.Status != 200 || r.Topic != first || r.MessageID == "" {
			t.Fatalf("receipt %d: %+v", i, r)
		}
	}
	official := newOfficialClient(t, b)
	if got := readTopic(t, official, first, len(records)); !slices.Equal(got, []string{string(records[0]), string(records[1]), string(records[2])}) {
		t.Fatalf("the official client read %q", got)
	}
	rd := recordio.NewReader(out.Body)
	for i, want := range records {
		got, err := rd.Next()
		if err != nil {
			t.Fatalf("GET stream, record %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("GET stream, record %d: %q, want %q", i, got, want)
		}
	}

	// The kubelet's ConfigMap update: a new generation directory and the ..data symlink renamed
	// onto it, seen inside the container through the read-only bind mount.
	swapGeneration(t, cfgDir, 2, map[string]string{cfgName: config(second)})
	if err := os.RemoveAll(filepath.Join(cfgDir, "..gen_001")); err != nil { // the kubelet removes the old one
		t.Fatal(err)
	}
	deadline = time.Now().Add(time.Minute)
	for !strings.Contains(grepLines(scrape(t, c.OpsURL), "bridge_config_reloads_total{"), `result="applied"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the ..data swap was not applied within a minute; /readyz: %s", readyzOf(c))
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, _, body := postOne(t, c.DataURL+"/v1/publish/events", map[string]string{"Content-Type": "application/json"}, rec(3))
	var answer struct {
		Published int `json:"published"`
	}
	if err := json.Unmarshal(body, &answer); code != 200 || err != nil || answer.Published != 1 {
		t.Fatalf("after the reload: %d %s", code, body)
	}
	if got := readTopic(t, official, second, 1); got[0] != string(rec(3)) {
		t.Fatalf("the reloaded route's topic holds %q", got)
	}
	if now := c.pid(t); now != pid {
		t.Fatalf("the bridge was restarted (pid %d, then %d): a reload must not restart it", pid, now)
	}

	// An ingress stream that would go on for ever: its record receipted, its body still open.
	open := openStream(t, h1Client, c.DataURL+"/v1/publish/events", nil)
	if err := open.send(rec(4)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-open.receipts:
		if r.Status != 200 || r.Topic != second {
			t.Fatalf("the open stream's receipt: %+v", r)
		}
	case <-time.After(time.Minute):
		t.Fatal("no receipt on the open stream within a minute")
	}

	if code := c.terminate(t, drainTimeout); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("the GET stream did not end cleanly on SIGTERM: %v", err)
	}
	if _, sum, err := open.drain(time.Minute); err != nil || sum.Status != 503 || sum.Published != 1 || sum.Records != 1 {
		t.Fatalf("the open stream ended with %+v, %v; want its summary: 503, one record published", sum, err)
	}
	if !strings.Contains(c.logs.String(), "configuration reloaded") {
		t.Errorf("the bridge's log does not mention the reload:\n%s", tail(c.logs.String(), 20))
	}
}

func readyzOf(c *container) string {
	_, body := get(c.OpsURL + "/readyz")
	return body
}

// TestImageOverTLSToTheBroker: pulsar+ssl:// from the image, verified with the broker's CA
// given in a mounted file (pulsar.tls.caFile) or found in the CA bundle at the image's path
// without any TLS key. The image's own bundle (Debian's public roots) does not trust the
// test CA, so there the broker is refused.
func TestImageOverTLSToTheBroker(t *testing.T) {
	img := imageUnderTest(t)
	b := broker.Get(t)
	if b.TLSURL == "" {
		t.Fatal("the broker has no TLS listener (PULSAR_TLS_URL unset; pulsar.sh makes one when openssl is installed)")
	}
	ca, err := os.ReadFile(b.TLSCAFile)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := os.ReadFile(caBundle())
	if err != nil {
		t.Fatal(err)
	}
	const drainTimeout = 10 * time.Second
	dep := bridgeDeployment(t)
	cfgVolume, cfgName := dep.configFile(t)
	tokenFile := path.Join(dep.mountPath(t, "pulsar-token"), "token")
	config := func(dataPort, opsPort int, topic, tls string) string {
		return fmt.Sprintf(`listen:
  data: 127.0.0.1:%d
  ops: 127.0.0.1:%d
pulsar:
  url: %s
  token: file:%s
%s
ingress:
  drainTimeout: %s
routes:
  - name: events
    default: {topic: %s}
`, dataPort, opsPort, b.TLSURL, tokenFile, tls, drainTimeout, topic)
	}
	publishOne := func(t *testing.T, c *container, topic string) {
		t.Helper()
		code, _, body := postOne(t, c.DataURL+"/v1/publish/events", map[string]string{"Content-Type": "application/json"}, rec(7))
		if code != 200 {
			t.Fatalf("POST over TLS: %d %s", code, body)
		}
		if got := readTopic(t, newOfficialClient(t, b), topic, 1); got[0] != string(rec(7)) {
			t.Fatalf("read back %q", got)
		}
	}
	run := func(t *testing.T, tls string, flags ...string) (*container, string) {
		t.Helper()
		ports, err := broker.FreePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		topic := b.Topic(t, "image-tls")
		volumes := map[string]string{
			cfgVolume:      volumeDir(t, map[string]string{cfgName: config(ports[0], ports[1], topic, tls)}),
			"pulsar-token": volumeDir(t, map[string]string{"token": "not-checked-by-this-broker"}),
		}
		c := runImage(t, img, ports[0], ports[1], volumes, flags...)
		c.waitOps(t, "/healthz", 200)
		return c, topic
	}

	t.Run("CA from a mounted file", func(t *testing.T) {
		caDir := volumeDir(t, map[string]string{"ca.crt": string(ca)})
		c, topic := run(t, "  tls: {caFile: /var/run/secrets/pulsar-ca/ca.crt}", "-v", caDir+":/var/run/secrets/pulsar-ca:ro")
		c.waitOps(t, "/readyz", 200)
		publishOne(t, c, topic)
		if code := c.terminate(t, drainTimeout); code != 0 {
			t.Fatalf("exit code %d after SIGTERM", code)
		}
	})

	t.Run("the image's own bundle refuses the test CA", func(t *testing.T) {
		c, _ := run(t, "")
		body := c.waitOps(t, "/readyz", 503)
		if !strings.Contains(body, "x509") && !strings.Contains(body, "certificate") {
			t.Fatalf("/readyz with the image's bundle: %s; want a certificate error", body)
		}
		if code := c.terminate(t, drainTimeout); code != 0 {
			t.Fatalf("exit code %d after SIGTERM", code)
		}
	})

	t.Run("CA from the bundle at the image's path", func(t *testing.T) {
		// The bundle a derived image or an update-ca-certificates run would make: the public
		// roots plus the private CA, where Go's crypto/x509 looks first on Linux.
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		extended := filepath.Join(dir, "ca-certificates.crt")
		if err := os.WriteFile(extended, append(append(slices.Clone(bundle), '\n'), ca...), 0o644); err != nil {
			t.Fatal(err)
		}
		c, topic := run(t, "", "-v", extended+":/etc/ssl/certs/ca-certificates.crt:ro")
		c.waitOps(t, "/readyz", 200)
		publishOne(t, c, topic)
		if code := c.terminate(t, drainTimeout); code != 0 {
			t.Fatalf("exit code %d after SIGTERM", code)
		}
	})
}

// connectAuth is what one connection's CONNECT command carried.
type connectAuth struct {
	Method string
	Data   string
	Err    string // the first frame was not a readable CONNECT
}

// connectSniffer relays TCP connections to a Pulsar broker and keeps the authentication
// method and data of each connection's first command (CONNECT), so a test sees the
// credentials a client sent to a broker that does not check them.
type connectSniffer struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	auths  []connectAuth
	conns  map[net.Conn]struct{}
	closed bool
}

func startConnectSniffer(t *testing.T, target string) *connectSniffer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &connectSniffer{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

// Addr is host:port to give clients instead of the broker's.
func (s *connectSniffer) Addr() string { return s.ln.Addr().String() }

// Auths returns what every connection so far sent in its CONNECT.
func (s *connectSniffer) Auths() []connectAuth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.auths)
}

func (s *connectSniffer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go s.relay(c)
	}
}

// track registers conns for close; false when the sniffer is closed already.
func (s *connectSniffer) track(conns ...net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	for _, c := range conns {
		s.conns[c] = struct{}{}
	}
	return true
}

func (s *connectSniffer) relay(client net.Conn) {
	defer s.wg.Done()
	defer client.Close()
	up, err := net.DialTimeout("tcp", s.target, 10*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	if !s.track(client, up) {
		return
	}
	_ = client.SetReadDeadline(time.Now().Add(30 * time.Second))
	frame, auth := readConnect(client)
	_ = client.SetReadDeadline(time.Time{})
	s.mu.Lock()
	s.auths = append(s.auths, auth)
	s.mu.Unlock()
	if auth.Err != "" {
		return
	}
	if _, err := up.Write(frame); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(client, up)
		client.Close()
	}()
	_, _ = io.Copy(up, client)
	up.Close()
	<-done
}

// Cut closes every open connection (clients reconnect) and returns how many CONNECTs were
// seen before.
func (s *connectSniffer) Cut() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
		delete(s.conns, c)
	}
	return len(s.auths)
}

func (s *connectSniffer) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

// readConnect reads one Pulsar frame (total size, command size, BaseCommand) and returns
// its bytes and the CONNECT's auth_method_name (field 5) and auth_data (field 3).
func readConnect(r io.Reader) ([]byte, connectAuth) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, connectAuth{Err: "frame size: " + err.Error()}
	}
	total := binary.BigEndian.Uint32(hdr[:])
	if total < 4 || total > 5<<20 {
		return nil, connectAuth{Err: fmt.Sprintf("frame size %d", total)}
	}
	frame := make([]byte, 4+total)
	copy(frame, hdr[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, connectAuth{Err: "frame: " + err.Error()}
	}
	cmdSize := binary.BigEndian.Uint32(frame[4:8])
	if cmdSize > total-4 {
		return nil, connectAuth{Err: fmt.Sprintf("command size %d in a frame of %d", cmdSize, total)}
	}
	cmd := frame[8 : 8+cmdSize]
	const typeConnect = 2 // BaseCommand.Type CONNECT; BaseCommand.connect is field 2 too
	if typ, _ := protoField(cmd, 1); typ.varint != typeConnect {
		return nil, connectAuth{Err: fmt.Sprintf("the first command has type %d, not CONNECT", typ.varint)}
	}
	connect, ok := protoField(cmd, 2)
	if !ok {
		return nil, connectAuth{Err: "CONNECT without its body"}
	}
	method, _ := protoField(connect.bytes, 5)
	data, _ := protoField(connect.bytes, 3)
	return frame, connectAuth{Method: string(method.bytes), Data: string(data.bytes)}
}

type protoValue struct {
	varint uint64
	bytes  []byte
}

// protoField finds field num in an encoded protobuf message (the last occurrence wins).
func protoField(b []byte, num protowire.Number) (protoValue, bool) {
	var v protoValue
	found := false
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return v, false
		}
		b = b[l:]
		switch {
		case n == num && typ == protowire.VarintType:
			x, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return v, false
			}
			v, found, b = protoValue{varint: x}, true, b[l:]
		case n == num && typ == protowire.BytesType:
			x, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return v, false
			}
			v, found, b = protoValue{bytes: x}, true, b[l:]
		default:
			l := protowire.ConsumeFieldValue(n, typ, b)
			if l < 0 {
				return v, false
			}
			b = b[l:]
		}
	}
	return v, found
}
