package main

import (
	"archive/tar"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImageRoundTrip builds the mocker's image as `make images` does, writes
// it as a docker-load tarball, reads it back, and checks the entrypoint,
// user, labels and file system, then runs the binary from the extracted
// layer with --help and --version.
func TestImageRoundTrip(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("runs the linux binary it builds")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "mocker")
	// The test runs in hack/images; the package path is the module's.
	if err := buildBinary(ctx, modulePath+"/services/mocker/cmd/mocker", bin, "9.8.7-test", "0123abcd"); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	img, err := buildImage(imageConfig{Service: "mocker", Binary: bin, CABundle: writeCABundle(t, dir), Version: "9.8.7-test", Revision: "0123abcd", Created: created, Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("switchyard/mocker:9.8.7-test")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "mocker.tar")
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}

	// docker load reads manifest.json for the tag and the config and layers.
	if tags := tarballTags(t, path); !slices.Equal(tags, []string{"switchyard/mocker:9.8.7-test"}) {
		t.Fatalf("manifest.json RepoTags = %v, want the image's tag", tags)
	}
	back, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{binPath}) || cf.Config.User != "65532:65532" || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Fatalf("config: entrypoint %q, user %q, platform %s/%s; want [%s], 65532:65532, linux/%s",
			cf.Config.Entrypoint, cf.Config.User, cf.OS, cf.Architecture, binPath, runtime.GOARCH)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  "9.8.7-test",
		"org.opencontainers.image.revision": "0123abcd",
		"org.opencontainers.image.title":    "switchyard-mocker",
		"org.opencontainers.image.created":  "2026-01-02T03:04:05Z",
	} {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}

	layers, err := back.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	root := filepath.Join(dir, "rootfs")
	files := extract(t, rc, root)
	for p, want := range map[string]struct {
		mode int64
		uid  int
	}{
		"usr/local/bin/service":             {0o755, 0},
		"etc/ssl/certs/ca-certificates.crt": {0o644, 0},
		"etc/passwd":                        {0o644, 0},
		"tmp/":                              {0o1777, 0},
		"home/nonroot/":                     {0o700, 65532},
	} {
		h, ok := files[p]
		if !ok {
			t.Errorf("layer has no %s", p)
			continue
		}
		if h.Mode != want.mode || h.Uid != want.uid || !h.ModTime.Equal(created) {
			t.Errorf("%s: mode %o uid %d mtime %v, want %o, %d, %v", p, h.Mode, h.Uid, h.ModTime, want.mode, want.uid, created)
		}
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil || !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd = %q, %v; want the nonroot user 65532", passwd, err)
	}

	service := filepath.Join(root, "usr", "local", "bin", "service")
	out, err := exec.CommandContext(ctx, service, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Usage of mocker") || !strings.Contains(string(out), "-registry-addr") {
		t.Fatalf("service --help from the layer: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, service, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mocker 9.8.7-test") || !strings.Contains(string(out), "revision 0123abcd") {
		t.Fatalf("service --version from the layer: %v\n%s", err, out)
	}
}

// TestImageNeedsCABundle: an image without CA certificates could not verify
// any TLS peer, so a missing or empty bundle is an error, not an image.
func TestImageNeedsCABundle(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bundle := range []string{filepath.Join(dir, "missing.pem"), empty} {
		if _, err := buildImage(imageConfig{Service: "x", Binary: bin, CABundle: bundle}); err == nil {
			t.Errorf("CA bundle %s: built an image, want an error", bundle)
		}
	}
}

// TestChartAppVersion reads the version the images default to from the
// chart, so that images and chart stay in step.
func TestChartAppVersion(t *testing.T) {
	v, err := chartAppVersion(filepath.Join("..", "..", "deploy", "helm", "switchyard", "Chart.yaml"))
	if err != nil || v == "" || strings.ContainsAny(v, `"' `) {
		t.Fatalf("chart appVersion = %q, %v", v, err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "Chart.yaml")
	if err := os.WriteFile(p, []byte("name: x\nversion: 1.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := chartAppVersion(p); err == nil {
		t.Fatal("a Chart.yaml without appVersion gave no error")
	}
}

func tarballTags(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no manifest.json in %s: %v", path, err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&m); err != nil || len(m) != 1 {
			t.Fatalf("manifest.json: %v, %d entries", err, len(m))
		}
		return m[0].RepoTags
	}
}

// extract writes the regular files of a layer under root and returns every
// entry's header by name.
func extract(t *testing.T, r io.Reader, root string) map[string]*tar.Header {
	t.Helper()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// writeCABundle writes a one-certificate PEM bundle, so that the test does
// not depend on the machine's ca-certificates.
func writeCABundle(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
