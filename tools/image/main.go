// Command image builds the container image the Kubernetes manifests run
// (ghcr.io/nbs-project/nbs:VERSION) without a container daemon or a
// registry: the two binaries, built static, on an empty base, written as an
// OCI image layout and as a tarball that `docker load`, `podman load` or
// `crane push` take.
//
// The build is reproducible: the same commit, version and Go toolchain give
// the same image digest. Every timestamp is the -created time (make image
// passes the commit's), the layer's entries are in a fixed order with fixed
// owners and modes, and the binaries are built with -trimpath.
//
//	go run . -repo ../.. -version v1.2.3 -out ../../bin/image
//
// It lives in its own module so that go-containerregistry stays out of the
// project's go.mod and out of the buf tools' graph in tools/go.mod.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// binDir is where the binaries go; the image's PATH names it, so the
// manifests' command: ["nbs-agent"] finds them.
const binDir = "usr/local/bin"

// The binaries, by the main package that builds each.
var binaries = []struct{ name, pkg string }{
	{"nbs-agent", "./agent/cmd/nbs-agent"},
	{"nbs-collector", "./collector/cmd/nbs-collector"},
}

type options struct {
	repo, version, out, repository, arch, caBundle string
	created                                        time.Time
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.repo, "repo", "../..", "the NBS repository's root (the main module)")
	fs.StringVar(&o.version, "version", "", "the version stamped into the binaries and the image's labels and tag (required)")
	fs.StringVar(&o.out, "out", "", "output directory: OCI layout in OUT/oci, tarball OUT/nbs.tar, digest in OUT/digest (required)")
	fs.StringVar(&o.repository, "repository", "ghcr.io/nbs-project/nbs", "the image's name, without the tag")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "GOARCH of the binaries and the image")
	fs.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt",
		"CA certificates for the collector's outbound TLS (webhooks, Alertmanager); empty for none")
	created := fs.Int64("created", 0, "the image's timestamps, Unix seconds (make image: the commit's time)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.version == "" || o.out == "" {
		return errors.New("-version and -out are required")
	}
	o.created = time.Unix(*created, 0).UTC()
	ref, err := name.NewTag(o.repository + ":" + o.version)
	if err != nil {
		return fmt.Errorf("image name %s:%s: %w", o.repository, o.version, err)
	}
	img, err := build(ctx, o)
	if err != nil {
		return err
	}
	digest, err := write(img, ref, o.out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s@%s\n", ref, digest)
	return nil
}

// build compiles the binaries and assembles the image.
func build(ctx context.Context, o options) (v1.Image, error) {
	tmp, err := os.MkdirTemp("", "nbs-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	files := map[string][]byte{}
	for _, b := range binaries {
		out := filepath.Join(tmp, b.name)
		// CGO_ENABLED=0: static, so nothing from a libc is needed on
		// the empty base; -trimpath and no VCS stamp so the bytes depend
		// on the source and the version, not on where or when.
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
			"-ldflags", "-s -w -X github.com/nbs-project/nbs/internal/buildinfo.version="+o.version,
			"-o", out, b.pkg)
		cmd.Dir = o.repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", b.pkg, err, msg)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return nil, err
		}
		files[binDir+"/"+b.name] = data
	}
	if o.caBundle != "" {
		data, err := os.ReadFile(o.caBundle)
		if err != nil {
			return nil, fmt.Errorf("CA bundle (-ca-bundle \"\" for none): %w", err)
		}
		files["etc/ssl/certs/ca-certificates.crt"] = data
	}
	layerTar, err := layerTar(files, o.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.created}, CreatedBy: "tools/image " + o.version,
		Comment: "nbs-agent and nbs-collector, static (CGO_ENABLED=0), on an empty base",
	}})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: o.created}
	cf.OS, cf.Architecture = "linux", o.arch
	cf.Config.Env = []string{"PATH=/" + binDir}
	// The collector's default; the agent's DaemonSet runs it as root.
	cf.Config.User = "65532:65532"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "nbs",
		"org.opencontainers.image.description": "NBS, the networking blackboard: nbs-agent and nbs-collector",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
		"org.opencontainers.image.source":      "https://github.com/nbs-project/nbs",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	return img, nil
}

// layerTar is the one layer: the directories, then the files, in sorted
// order, root-owned, with fixed modes and times.
func layerTar(files map[string][]byte, mtime time.Time) ([]byte, error) {
	dirs := []struct {
		name string
		mode int64
	}{
		{"etc/", 0o755}, {"etc/ssl/", 0o755}, {"etc/ssl/certs/", 0o755},
		{"tmp/", 0o1777},
		{"usr/", 0o755}, {"usr/local/", 0o755}, {"usr/local/bin/", 0o755},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Uid, h.Gid, h.Format = mtime, 0, 0, tar.FormatPAX
		return tw.WriteHeader(h)
	}
	for _, d := range dirs {
		if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode}); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		mode := int64(0o644)
		if filepath.Dir(n) == binDir {
			mode = 0o755
		}
		if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: mode, Size: int64(len(files[n]))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// write puts the image in out: an OCI layout (out/oci), a tarball
// (out/nbs.tar) and its digest (out/digest), replacing what was there.
func write(img v1.Image, ref name.Tag, out string) (v1.Hash, error) {
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return v1.Hash{}, err
	}
	oci := filepath.Join(out, "oci")
	if err := os.RemoveAll(oci); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(oci, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("OCI layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.String(),
	})); err != nil {
		return v1.Hash{}, fmt.Errorf("OCI layout: %w", err)
	}
	if err := tarball.WriteToFile(filepath.Join(out, "nbs.tar"), ref, img); err != nil {
		return v1.Hash{}, fmt.Errorf("tarball: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, "digest"), []byte(digest.String()+"\n"), 0o644); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}
