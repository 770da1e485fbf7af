// Command images builds one OCI image per Switchyard service without a
// Docker engine: a static Go binary (CGO off) at /usr/local/bin/service, the
// entrypoint, on an empty base with a CA bundle, /etc/passwd and /etc/group
// naming the non-root user 65532 it runs as, and a /tmp. Each image is
// written as a tarball that `docker load` (and podman, crane, skopeo)
// accepts, tagged <repo-prefix><service>:<version>, the image the Helm chart
// runs by default. The Dockerfile builds the same layout for those with
// Docker.
//
//	go run ./hack/images -out bin/images             # make images
//	docker load -i bin/images/registry.tar
//
// The version defaults to the chart's appVersion
// (deploy/helm/switchyard/Chart.yaml), so images and chart move together; it
// is linked into each binary (--version) and labelled on each image
// (org.opencontainers.image.version), with the git revision.
//
// With -rootfs DIR it writes one service's file system as a directory
// instead (the Dockerfile's build stage runs it, so that both give the same
// layout). With -test-images it builds the images the compose test runs in
// place of the official etcd and NATS ones, which no registry can serve
// there: etcd with etcdctl and nats-server, built from their Go modules at
// the versions of the project's go.mod (make test-images).
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// services are the binaries that get an image: services/<name>/cmd/<name>.
var services = []string{"registry", "eventbus", "router", "frontend", "mocker", "adapter", "planner"}

const (
	// binPath is where the binary sits in every image (the Dockerfile's too).
	binPath = "/usr/local/bin/service"
	// uid is the non-root user and group the images run as (distroless's
	// "nonroot"), the chart's runAsUser.
	uid = 65532
	// certsPath is the CA bundle's path in the image, where Go looks first.
	certsPath  = "/etc/ssl/certs/ca-certificates.crt"
	modulePath = "github.com/switchyard-llm/switchyard"
	source     = "https://github.com/switchyard-llm/switchyard"
)

// imageConfig is what one image is made of.
type imageConfig struct {
	Service  string // service name: the title and the tag's repository
	Binary   string // path of the static binary to put at binPath
	CABundle string // PEM CA bundle to put at certsPath
	Version  string
	Revision string
	Created  time.Time // image creation time (the commit's, for reproducible images)
	Arch     string

	// A test image (testImages) sets these instead of Binary: its binaries
	// by path in the image, its entrypoint and command, its title; it runs
	// as root, as the official etcd and NATS images do.
	Binaries   []imageFile
	Entrypoint []string
	Cmd        []string
	Title      string
	Root       bool
}

// imageFile is one executable of an image: Source on this machine, Path in
// the image.
type imageFile struct{ Path, Source string }

// testImage is an image of a program from another Go module, built in the
// testImagesModule with the version the project's go.mod requires.
type testImage struct {
	Name       string            // file name and tag repository: switchyard-test/<Name>
	Module     string            // the module whose version tags the image
	Packages   map[string]string // package to build -> path in the image
	Entrypoint []string
	Cmd        []string
}

// testImagesModule is the module (tools/testimages) that requires the test
// images' programs, at the versions of the project's go.mod.
const testImagesModule = "tools/testimages"

// testImages stand in for quay.io/coreos/etcd and nats in the compose test:
// the same programs at the same paths (/usr/local/bin; etcd's image runs
// `etcd` by its command, NATS's takes flags as its command).
var testImages = []testImage{
	{
		Name: "etcd", Module: "go.etcd.io/etcd/server/v3",
		Packages: map[string]string{
			"go.etcd.io/etcd/server/v3":  "/usr/local/bin/etcd",
			"go.etcd.io/etcd/etcdctl/v3": "/usr/local/bin/etcdctl",
		},
		Cmd: []string{"/usr/local/bin/etcd"},
	},
	{
		Name: "nats", Module: "github.com/nats-io/nats-server/v2",
		Packages:   map[string]string{"github.com/nats-io/nats-server/v2": "/usr/local/bin/nats-server"},
		Entrypoint: []string{"/usr/local/bin/nats-server"},
	},
}

func main() {
	out := flag.String("out", "bin/images", "directory of the image tarballs")
	version := flag.String("version", "", "image and binary version (default: appVersion of deploy/helm/switchyard/Chart.yaml)")
	revision := flag.String("revision", "", "VCS revision (default: git rev-parse HEAD)")
	prefix := flag.String("repo-prefix", "switchyard/", "image repository prefix; the tag is <prefix><service>:<version>")
	caBundle := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle copied into each image (Debian: ca-certificates)")
	only := flag.String("services", strings.Join(services, ","), "comma-separated services to build")
	rootfs := flag.String("rootfs", "", "write the file system of the one service named by -services to this directory instead of an image (the Dockerfile's build stage)")
	tests := flag.Bool("test-images", false, "build the compose test's etcd and NATS images instead (switchyard-test/<name>:<module version>)")
	flag.Parse()
	var err error
	switch {
	case *tests:
		err = runTestImages(context.Background(), *out, *caBundle)
	case *rootfs != "":
		err = runRootFS(context.Background(), *rootfs, *version, *revision, *caBundle, *only)
	default:
		err = run(context.Background(), *out, *version, *revision, *prefix, *caBundle, strings.Split(*only, ","))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// versionAndRevision fills in the defaults of -version (the chart's
// appVersion) and -revision (git's HEAD, whose commit time dates the image;
// the epoch without git, as in a Docker build).
func versionAndRevision(ctx context.Context, version, revision string) (string, string, time.Time, error) {
	if version == "" {
		v, err := chartAppVersion(filepath.Join("deploy", "helm", "switchyard", "Chart.yaml"))
		if err != nil {
			return "", "", time.Time{}, err
		}
		version = v
	}
	created := time.Unix(0, 0).UTC()
	if revision == "" {
		if b, err := exec.CommandContext(ctx, "git", "log", "-1", "--format=%H %ct").Output(); err == nil {
			var secs int64
			if _, err := fmt.Sscanf(string(b), "%s %d", &revision, &secs); err == nil {
				created = time.Unix(secs, 0).UTC()
			}
		}
	}
	return version, revision, created, nil
}

// runRootFS writes the file system of one service's image to dir: the
// Dockerfile copies it onto an empty base and sets the same configuration
// (see imageSettings), so both builds give one layout.
func runRootFS(ctx context.Context, dir, version, revision, caBundle, svc string) error {
	if !slices.Contains(services, svc) {
		return fmt.Errorf("-rootfs needs one service in -services, one of %s; got %q", strings.Join(services, ", "), svc)
	}
	version, revision, created, err := versionAndRevision(ctx, version, revision)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "switchyard-rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, svc)
	if err := buildBinary(ctx, "./services/"+svc+"/cmd/"+svc, bin, version, revision); err != nil {
		return fmt.Errorf("build %s: %w", svc, err)
	}
	data, err := rootTar(imageConfig{Service: svc, Binary: bin, CABundle: caBundle, Version: version, Revision: revision, Created: created})
	if err != nil {
		return err
	}
	return extractTar(bytes.NewReader(data), dir)
}

func run(ctx context.Context, out, version, revision, prefix, caBundle string, svcs []string) error {
	version, revision, created, err := versionAndRevision(ctx, version, revision)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "switchyard-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, svc := range svcs {
		bin := filepath.Join(tmp, svc)
		if err := buildBinary(ctx, "./services/"+svc+"/cmd/"+svc, bin, version, revision); err != nil {
			return fmt.Errorf("build %s: %w", svc, err)
		}
		img, err := buildImage(imageConfig{Service: svc, Binary: bin, CABundle: caBundle, Version: version, Revision: revision, Created: created, Arch: runtime.GOARCH})
		if err != nil {
			return fmt.Errorf("image %s: %w", svc, err)
		}
		tag, err := name.NewTag(prefix + svc + ":" + version)
		if err != nil {
			return err
		}
		path := filepath.Join(out, svc+".tar")
		if err := tarball.WriteToFile(path, tag, img); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		fmt.Printf("%-10s %-32s %6.1f MB  %s\n", svc, tag.String(), float64(st.Size())/1e6, path)
	}
	return nil
}

// chartAppVersion reads appVersion from a Chart.yaml.
func chartAppVersion(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s has no appVersion", path)
}

// buildBinary builds a static binary of pkg with the version and revision
// linked in (pkg/cli prints them on --version).
func buildBinary(ctx context.Context, pkg, out, version, revision string) error {
	ldflags := fmt.Sprintf("-s -w -X %[1]s/pkg/cli.version=%[2]s -X %[1]s/pkg/cli.revision=%[3]s", modulePath, version, revision)
	return goBuild(ctx, "", pkg, out, ldflags)
}

// goBuild builds a static linux binary of pkg in the module at dir (""
// for the current one).
func goBuild(ctx context.Context, dir, pkg, out, ldflags string) error {
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", abs, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// moduleVersion is the version of module mod that the module at dir
// requires.
func moduleVersion(ctx context.Context, dir, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", mod)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s in %q: %w", mod, dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// runTestImages builds testImages into out: <name>.tar tagged
// switchyard-test/<name>:<version>, the version being the one of the
// project's go.mod, which testImagesModule must require too.
func runTestImages(ctx context.Context, out, caBundle string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "switchyard-test-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, ti := range testImages {
		want, err := moduleVersion(ctx, "", ti.Module)
		if err != nil {
			return err
		}
		c := imageConfig{Title: "switchyard-test-" + ti.Name, CABundle: caBundle, Version: want,
			Created: time.Unix(0, 0).UTC(), Arch: runtime.GOARCH, Entrypoint: ti.Entrypoint, Cmd: ti.Cmd, Root: true}
		if got, err := moduleVersion(ctx, testImagesModule, ti.Module); err != nil {
			return err
		} else if got != want {
			return fmt.Errorf("%s/go.mod requires %s %s, go.mod %s: make them agree (cd %s && go get %s@%s)",
				testImagesModule, ti.Module, got, want, testImagesModule, ti.Module, want)
		}
		for _, pkg := range slices.Sorted(maps.Keys(ti.Packages)) {
			bin := filepath.Join(tmp, path.Base(ti.Packages[pkg]))
			if err := goBuild(ctx, testImagesModule, pkg, bin, "-s -w"); err != nil {
				return fmt.Errorf("build %s: %w", pkg, err)
			}
			c.Binaries = append(c.Binaries, imageFile{Path: ti.Packages[pkg], Source: bin})
		}
		img, err := buildImage(c)
		if err != nil {
			return fmt.Errorf("image %s: %w", ti.Name, err)
		}
		tag, err := name.NewTag("switchyard-test/" + ti.Name + ":" + want)
		if err != nil {
			return err
		}
		p := filepath.Join(out, ti.Name+".tar")
		if err := tarball.WriteToFile(p, tag, img); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		fmt.Printf("%-10s %-32s %6.1f MB  %s\n", ti.Name, tag.String(), float64(st.Size())/1e6, p)
	}
	return nil
}

// imageSettings is the configuration an image of c runs with: entrypoint,
// command, user, working directory and environment. The Dockerfile sets the
// same for a service (TestDockerfileMatchesImages).
func imageSettings(c imageConfig) (entrypoint, cmd []string, user, workdir string, env []string) {
	env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + certsPath}
	if c.Binaries != nil {
		return c.Entrypoint, c.Cmd, "0:0", "/", env
	}
	return []string{binPath}, nil, fmt.Sprintf("%d:%d", uid, uid), "/home/nonroot", env
}

// buildImage makes the image of one service: one layer on an empty base.
func buildImage(c imageConfig) (v1.Image, error) {
	layer, err := rootLayer(c)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", c.Arch, v1.Time{Time: c.Created}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User, cf.Config.WorkingDir, cf.Config.Env = imageSettings(c)
	title := c.Title
	if title == "" {
		title = "switchyard-" + c.Service
	}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    title,
		"org.opencontainers.image.version":  c.Version,
		"org.opencontainers.image.revision": c.Revision,
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.created":  c.Created.Format(time.RFC3339),
		"org.opencontainers.image.description": "Switchyard " + c.Service +
			": a control plane for distributed LLM inference",
	}
	if c.Binaries != nil {
		delete(cf.Config.Labels, "org.opencontainers.image.revision")
		cf.Config.Labels["org.opencontainers.image.description"] = "Switchyard's test stand-in for the official image of " + c.Title
	}
	return mutate.ConfigFile(img, cf)
}

// rootLayer is the image's whole file system as one uncompressed tar, with
// fixed times and owners so that the same inputs give the same layer.
func rootLayer(c imageConfig) (v1.Layer, error) {
	data, err := rootTar(c)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// rootTar is rootLayer's tar.
func rootTar(c imageConfig) ([]byte, error) {
	bins := c.Binaries
	if bins == nil {
		bins = []imageFile{{Path: binPath, Source: c.Binary}}
	}
	binData := make([][]byte, len(bins))
	for i, b := range bins {
		data, err := os.ReadFile(b.Source)
		if err != nil {
			return nil, err
		}
		binData[i] = data
	}
	certs, err := os.ReadFile(c.CABundle)
	if err != nil {
		return nil, fmt.Errorf("CA bundle (install ca-certificates or pass -ca-bundle): %w", err)
	}
	if !bytes.Contains(certs, []byte("BEGIN CERTIFICATE")) {
		return nil, fmt.Errorf("%s holds no PEM certificate", c.CABundle)
	}
	mtime := c.Created
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(p string, mode int64, owner int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, Uid: owner, Gid: owner, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(p string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	steps := []error{
		dir("etc", 0o755, 0), file("etc/passwd", 0o644, []byte(passwd)), file("etc/group", 0o644, []byte(group)),
		dir("etc/ssl", 0o755, 0), dir("etc/ssl/certs", 0o755, 0), file(strings.TrimPrefix(certsPath, "/"), 0o644, certs),
		dir("home", 0o755, 0), dir("home/nonroot", 0o700, uid),
		dir("tmp", 0o1777, 0),
		dir("usr", 0o755, 0), dir("usr/local", 0o755, 0), dir("usr/local/bin", 0o755, 0),
	}
	for i, b := range bins {
		if path.Dir(b.Path) != "/usr/local/bin" {
			return nil, fmt.Errorf("%s: an image's programs go in /usr/local/bin", b.Path)
		}
		steps = append(steps, file(strings.TrimPrefix(b.Path, "/"), 0o755, binData[i]))
	}
	steps = append(steps, tw.Close())
	if err := errors.Join(steps...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// extractTar writes a layer's directories and regular files under dir with
// their modes and, when run as root, their owners (as the Dockerfile's build
// stage is).
func extractTar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("layer entry %q leaves %s", h.Name, dir)
		}
		mode := os.FileMode(h.Mode).Perm()
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if err = errors.Join(err, f.Close()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("layer entry %q: type %c not written", h.Name, h.Typeflag)
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				return err
			}
		}
	}
}
