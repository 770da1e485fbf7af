package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestDockerfileMatchesImages: the Dockerfile's final stage copies the file
// system that hack/images writes (-rootfs) onto an empty base and must set
// what hack/images sets in an image's configuration: environment, user,
// working directory, entrypoint.
func TestDockerfileMatchesImages(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages [][]string // instructions of each stage, continuation lines joined
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(text, `\`); ok {
			line += s + " "
			continue
		}
		line += text
		if strings.HasPrefix(line, "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], line)
		}
		line = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and the image", len(stages))
	}
	if !slices.ContainsFunc(stages[0], func(s string) bool { return strings.HasPrefix(s, "RUN go run ./hack/images -rootfs /rootfs ") }) {
		t.Errorf("the build stage does not write the file system with hack/images -rootfs:\n%s", strings.Join(stages[0], "\n"))
	}
	entry, cmd, user, workdir, env := imageSettings(imageConfig{Service: "mocker"})
	ep, _ := json.Marshal(entry)
	want := map[string]string{
		"FROM":       "scratch",
		"ENV":        strings.Join(env, " "),
		"USER":       user,
		"WORKDIR":    workdir,
		"ENTRYPOINT": string(ep),
	}
	if cmd != nil {
		t.Fatalf("service images have a command %q; the Dockerfile sets none", cmd)
	}
	got := map[string]string{}
	for _, in := range stages[1] {
		k, v, _ := strings.Cut(in, " ")
		if k == "COPY" && !strings.HasPrefix(v, "--from=build ") {
			t.Errorf("the image stage copies %q from elsewhere than the build stage", v)
		}
		got[k] = v
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("Dockerfile %s %q, hack/images sets %q", k, got[k], w)
		}
	}
	if got["CMD"] != "" {
		t.Errorf("Dockerfile CMD %q; hack/images sets none", got["CMD"])
	}
}

// TestRootFSIsTheLayer: -rootfs (the Dockerfile's build stage) writes the
// same entries, contents and modes as the image layer of `make images`, and
// the owners too when it runs as root (as a Docker build does).
func TestRootFSIsTheLayer(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := imageConfig{Service: "router", Binary: bin, CABundle: writeCABundle(t, dir), Version: "1.2.3", Created: time.Unix(1e9, 0).UTC()}
	data, err := rootTar(c)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "rootfs")
	if err := extractTar(bytes.NewReader(data), root); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(data))
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		st, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", h.Name, err)
			continue
		}
		mode := int64(st.Mode().Perm())
		if st.Mode()&os.ModeSticky != 0 {
			mode |= 0o1000
		}
		if mode != h.Mode || st.IsDir() != (h.Typeflag == tar.TypeDir) {
			t.Errorf("%s: mode %o dir %v, layer %o type %c", h.Name, mode, st.IsDir(), h.Mode, h.Typeflag)
		}
		if os.Geteuid() == 0 && fileUID(st) >= 0 {
			if uid := fileUID(st); uid != h.Uid {
				t.Errorf("%s: owner %d, layer %d", h.Name, uid, h.Uid)
			}
		}
		if h.Typeflag == tar.TypeReg {
			want, _ := io.ReadAll(tr)
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes (%v), layer %d", h.Name, len(got), err, len(want))
			}
		}
	}
	if n < 10 {
		t.Fatalf("layer has %d entries", n)
	}
}

// TestTestImageConfig: the etcd stand-in holds etcd and etcdctl where the
// official image has them, runs as root with etcd as its command (the
// compose file's command names `etcd`, found on PATH); the NATS stand-in
// takes flags as its command, as the official images do.
func TestTestImageConfig(t *testing.T) {
	dir := t.TempDir()
	ca := writeCABundle(t, dir)
	for _, ti := range testImages {
		c := imageConfig{Title: "switchyard-test-" + ti.Name, CABundle: ca, Version: "v0.0.1", Created: time.Unix(0, 0).UTC(),
			Arch: "amd64", Entrypoint: ti.Entrypoint, Cmd: ti.Cmd, Root: true}
		for pkg, p := range ti.Packages {
			src := filepath.Join(dir, ti.Name+"-"+filepath.Base(p))
			if err := os.WriteFile(src, []byte(pkg), 0o755); err != nil {
				t.Fatal(err)
			}
			c.Binaries = append(c.Binaries, imageFile{Path: p, Source: src})
		}
		img, err := buildImage(c)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != "0:0" || !slices.Equal(cf.Config.Entrypoint, ti.Entrypoint) || !slices.Equal(cf.Config.Cmd, ti.Cmd) ||
			!slices.Contains(cf.Config.Env, "PATH=/usr/local/bin:/usr/bin:/bin") {
			t.Errorf("%s: user %q entrypoint %q cmd %q env %q", ti.Name, cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Env)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", ti.Name, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		files := extract(t, rc, filepath.Join(dir, "rootfs-"+ti.Name))
		rc.Close()
		for _, p := range ti.Packages {
			if h, ok := files[strings.TrimPrefix(p, "/")]; !ok || h.Mode != 0o755 {
				t.Errorf("%s: %s missing or not executable", ti.Name, p)
			}
		}
	}
	if _, err := rootTar(imageConfig{CABundle: ca, Binaries: []imageFile{{Path: "/bin/etcd", Source: ca}}}); err == nil {
		t.Error("a program outside /usr/local/bin gave no error")
	}
}

// TestTestImagesModuleVersions: tools/testimages requires the programs of
// the test images at the versions the project's go.mod does (make
// test-images refuses to build otherwise).
func TestTestImagesModuleVersions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ti := range testImages {
		want, err := moduleVersion(ctx, filepath.Join("..", ".."), ti.Module)
		if err != nil {
			t.Fatal(err)
		}
		got, err := moduleVersion(ctx, filepath.Join("..", "..", testImagesModule), ti.Module)
		if err != nil {
			t.Fatal(err)
		}
		if got != want || want == "" {
			t.Errorf("%s: %s requires %s, go.mod %s", ti.Module, testImagesModule, got, want)
		}
	}
}

// TestComposeFileNamesTheImages: every Switchyard service of
// docker-compose.yaml runs the image `make images` tags for it
// (switchyard/<service>:<the chart's appVersion>), and the file's etcd and
// NATS images are the official ones the test images stand in for.
func TestComposeFileNamesTheImages(t *testing.T) {
	version, err := chartAppVersion(filepath.Join("..", "..", "deploy", "helm", "switchyard", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct {
			Image string `json:"image"`
			Build *struct {
				Args map[string]string `json:"args"`
			} `json:"build"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Services) == 0 {
		t.Fatal("no services in docker-compose.yaml")
	}
	for name, s := range file.Services {
		switch {
		case s.Build != nil:
			svc := s.Build.Args["SERVICE"]
			if !slices.Contains(services, svc) || s.Image != "switchyard/"+svc+":"+version {
				t.Errorf("%s builds %q as %q; make images tags switchyard/%s:%s", name, svc, s.Image, svc, version)
			}
		case strings.HasPrefix(name, "etcd"):
			if !strings.HasPrefix(s.Image, "quay.io/coreos/etcd:") {
				t.Errorf("%s runs %q", name, s.Image)
			}
		case strings.HasPrefix(name, "nats"):
			if !strings.HasPrefix(s.Image, "nats:") {
				t.Errorf("%s runs %q", name, s.Image)
			}
		default:
			t.Errorf("%s: neither one of ours nor etcd or NATS (%q)", name, s.Image)
		}
	}
}
