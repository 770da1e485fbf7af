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
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// services are the binaries that get an image: services/<name>/cmd/<name>.
var services = []string{"registry", "eventbus", "router", "frontend", "mocker", "adapter"}

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
}

func main() {
	out := flag.String("out", "bin/images", "directory of the image tarballs")
	version := flag.String("version", "", "image and binary version (default: appVersion of deploy/helm/switchyard/Chart.yaml)")
	revision := flag.String("revision", "", "VCS revision (default: git rev-parse HEAD)")
	prefix := flag.String("repo-prefix", "switchyard/", "image repository prefix; the tag is <prefix><service>:<version>")
	caBundle := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle copied into each image (Debian: ca-certificates)")
	only := flag.String("services", strings.Join(services, ","), "comma-separated services to build")
	flag.Parse()
	if err := run(context.Background(), *out, *version, *revision, *prefix, *caBundle, strings.Split(*only, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, version, revision, prefix, caBundle string, svcs []string) error {
	if version == "" {
		v, err := chartAppVersion(filepath.Join("deploy", "helm", "switchyard", "Chart.yaml"))
		if err != nil {
			return err
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
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
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
	cf.Config.Entrypoint = []string{binPath}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, uid)
	cf.Config.WorkingDir = "/home/nonroot"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + certsPath}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    "switchyard-" + c.Service,
		"org.opencontainers.image.version":  c.Version,
		"org.opencontainers.image.revision": c.Revision,
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.created":  c.Created.Format(time.RFC3339),
		"org.opencontainers.image.description": "Switchyard " + c.Service +
			": a control plane for distributed LLM inference",
	}
	return mutate.ConfigFile(img, cf)
}

// rootLayer is the image's whole file system as one uncompressed tar, with
// fixed times and owners so that the same inputs give the same layer.
func rootLayer(c imageConfig) (v1.Layer, error) {
	bin, err := os.ReadFile(c.Binary)
	if err != nil {
		return nil, err
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
		file(strings.TrimPrefix(binPath, "/"), 0o755, bin),
		tw.Close(),
	}
	if err := errors.Join(steps...); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
