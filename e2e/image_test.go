package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// imageVersion is what the test stamps; imageCreated its timestamps.
const (
	imageVersion = "v0.0.0-imagetest"
	imageCreated = 1700000000
)

// The image make image builds (tools/image) is the one the Kubernetes
// manifests run: built twice it is the same image; its one layer holds the
// two static binaries and nothing else of a base; its binaries say their
// version; the collector, run chrooted in the image's own files, stores the
// reports of the image's agent measuring a lab namespace, which reports the
// stamped version.
func TestImageBuildsReproduciblyAndRuns(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	db := pgcluster.Database(t)

	first, second := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	buildImage(t, first)
	buildImage(t, second)
	for _, f := range []string{"digest", "nbs.tar", "oci/index.json"} {
		a, errA := os.ReadFile(filepath.Join(first, f))
		b, errB := os.ReadFile(filepath.Join(second, f))
		if err := errors.Join(errA, errB); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("two builds of the same source differ in %s", f)
		}
	}

	rootfs := t.TempDir()
	cfg := unpackOCI(t, filepath.Join(first, "oci"), rootfs)
	if got := cfg.Config.Labels["org.opencontainers.image.version"]; got != imageVersion {
		t.Errorf("label org.opencontainers.image.version = %q, want %q", got, imageVersion)
	}
	if want := time.Unix(imageCreated, 0).UTC(); !cfg.Created.Equal(want) {
		t.Errorf("created = %v, want %v", cfg.Created, want)
	}
	if cfg.OS != "linux" || !slices.Contains(cfg.Config.Env, "PATH=/usr/local/bin") {
		t.Errorf("os %q, env %q: want linux and PATH=/usr/local/bin (the manifests' command: [\"nbs-agent\"] relies on it)", cfg.OS, cfg.Config.Env)
	}

	agentBin := filepath.Join(rootfs, "usr/local/bin/nbs-agent")
	for _, bin := range []string{agentBin, filepath.Join(rootfs, "usr/local/bin/nbs-collector")} {
		requireStatic(t, bin)
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if want := filepath.Base(bin) + " " + imageVersion + "\n"; err != nil || string(out) != want {
			t.Errorf("%s --version: %q (%v), want %q", filepath.Base(bin), out, err, want)
		}
	}

	// The collector sees only the image's files, as in its pod; it
	// reaches the lab's PostgreSQL over loopback.
	var stdout bytes.Buffer
	tok := chrooted(rootfs, "nbs-collector", "token", "create", "--db.url", db, "--name", "image-test", "--role", "admin", "--expires", "1d")
	tok.Stdout, tok.Stderr = &stdout, testWriter{t}
	if err := tok.Run(); err != nil {
		t.Fatalf("nbs-collector token create in the image: %v", err)
	}
	col := &collector{grpcAddr: freeAddr(t), httpAddr: freeAddr(t), token: strings.TrimSpace(stdout.String())}
	colProc := chrooted(rootfs, "nbs-collector", "--grpc.listen-address", col.grpcAddr, "--http.listen-address", col.httpAddr, "--log.level", "warn")
	colProc.Env = append(colProc.Env, "NBS_DB_URL="+db)
	startProcess(t, "collector", colProc)
	eventually(t, 30*time.Second, func() string {
		resp, err := http.Get("http://" + col.httpAddr + "/readyz")
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "readyz: " + resp.Status
		}
		return ""
	})

	dir := t.TempDir()
	startProcess(t, "agent", exec.Command(agentBin, "--collector.address", col.grpcAddr, "--node.name", "image-b", "--netns", lab.B,
		"--interval", interval.String(), "--snapshot.every", "1h", "--spool.dir", filepath.Join(dir, "spool"),
		"--node.credential-file", filepath.Join(dir, "node-credential"), "--bpf.pin-dir", "none", "--log.level", "warn"))
	waitNode(t, col, "image-b")
	var node struct {
		AgentVersion string `json:"agent_version"`
	}
	if code := col.getJSON(t, "/api/v1/nodes/image-b", &node); code != http.StatusOK || node.AgentVersion != imageVersion {
		t.Errorf("GET /api/v1/nodes/image-b: %d, agent_version %q, want %q", code, node.AgentVersion, imageVersion)
	}
	lab.ResetNoSocket(t, 5)
	eventually(t, withinTwoIntervals, func() string {
		if got := storedTotal(t, col, "image-b", "tcp_reset/sent/no_socket"); got != 5 {
			return fmt.Sprintf("stored %v resets, want the 5 sent", got)
		}
		return ""
	})
}

// buildImage runs the image builder as make image does, into out.
func buildImage(t *testing.T, out string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".", "-repo", root, "-version", imageVersion, "-created", fmt.Sprint(imageCreated), "-out", out)
	cmd.Dir = filepath.Join(root, "tools", "image")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tools/image: %v\n%s", err, msg)
	}
}

type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
}

type imageConfig struct {
	Created      time.Time `json:"created"`
	OS           string    `json:"os"`
	Architecture string    `json:"architecture"`
	Config       struct {
		Env    []string          `json:"Env"`
		User   string            `json:"User"`
		Labels map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// unpackOCI reads the OCI layout at dir with nothing but the standard
// library (so a fault of the builder's library cannot hide itself), checks
// every blob against its digest, unpacks the one layer into rootfs and
// returns the image's config.
func unpackOCI(t *testing.T, dir, rootfs string) imageConfig {
	t.Helper()
	blob := func(d string) []byte {
		hexDigest, ok := strings.CutPrefix(d, "sha256:")
		if !ok {
			t.Fatalf("digest %q: want sha256", d)
		}
		b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexDigest))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexDigest {
			t.Fatalf("blob %s does not match its digest", d)
		}
		return b
	}
	var index struct{ Manifests []ociDescriptor }
	var manifest struct {
		Config ociDescriptor
		Layers []ociDescriptor
	}
	var cfg imageConfig
	mustJSON(t, readFile(t, filepath.Join(dir, "index.json")), &index)
	if len(index.Manifests) != 1 || index.Manifests[0].MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Fatalf("index.json: want one OCI image manifest, got %+v", index.Manifests)
	}
	mustJSON(t, blob(index.Manifests[0].Digest), &manifest)
	mustJSON(t, blob(manifest.Config.Digest), &cfg)
	// An empty base: one layer, ours.
	if len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" || len(cfg.RootFS.DiffIDs) != 1 {
		t.Fatalf("want one gzip layer, got %+v (diff_ids %v)", manifest.Layers, cfg.RootFS.DiffIDs)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(layer); "sha256:"+hex.EncodeToString(sum[:]) != cfg.RootFS.DiffIDs[0] {
		t.Fatal("the layer does not match its diff_id")
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != imageCreated {
			t.Errorf("%s: uid %d gid %d mtime %v: want root's, at the image's time", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		path := filepath.Join(rootfs, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, os.FileMode(h.Mode).Perm()); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, os.FileMode(h.Mode).Perm()); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("%s: unexpected entry type %c", h.Name, h.Typeflag)
		}
	}
	want := []string{"etc/", "etc/ssl/", "etc/ssl/certs/", "tmp/", "usr/", "usr/local/", "usr/local/bin/",
		"etc/ssl/certs/ca-certificates.crt", "usr/local/bin/nbs-agent", "usr/local/bin/nbs-collector"}
	if !slices.Equal(names, want) {
		t.Errorf("layer entries %q, want %q", names, want)
	}
	return cfg
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %.200s: %v", b, err)
	}
}

// requireStatic fails unless bin is a static executable: on the empty base
// there is no dynamic loader and no libc.
func requireStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for a dynamic loader", filepath.Base(bin))
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s links %v", filepath.Base(bin), libs)
	}
}

// chrooted runs the image's command with the image's files as its root and
// the image's PATH, as a container runtime would.
func chrooted(rootfs, name string, args ...string) *exec.Cmd {
	// The path is looked up after the chroot, inside the image.
	cmd := exec.Command("/usr/local/bin/"+name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/bin"}
	return cmd
}

// startProcess starts cmd with its output in the test's log and stops it
// (SIGTERM, as a kubelet does) when the test ends.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) {
	t.Helper()
	w := testWriter{t}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("%s still running 15s after SIGTERM", name)
		}
	})
}
