// Command pause is the sandbox ("pause") container of a pod on the
// single-node cluster hack/kube-node.sh runs: it holds the pod's namespaces
// until it is told to stop. No image can be pulled here, so it also writes
// its own image: `pause -image pause.tar -ref registry.k8s.io/pause:3.10`
// writes an OCI image archive (for `ctr images import`) whose one layer is
// this executable at /pause.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	image := flag.String("image", "", "write the OCI image archive of this program to this file, then exit")
	ref := flag.String("ref", "registry.k8s.io/pause:3.10", "the image's name in the archive")
	flag.Parse()
	if *image != "" {
		if err := writeImage(*image, *ref); err != nil {
			fmt.Fprintln(os.Stderr, "pause:", err)
			os.Exit(1)
		}
		return
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// writeImage writes an OCI image layout as a tar archive: the layer (this
// executable as /pause), the config naming it the entrypoint, the manifest
// and an index whose annotation names the image.
func writeImage(path, ref string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := lw.Write(bin); err != nil {
		return err
	}
	if err := lw.Close(); err != nil {
		return err
	}
	lb := layer.Bytes()
	config, err := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(lb)}}})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(lb), "size": len(lb)}}})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
		"annotations": map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref}}}})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		b    []byte
	}{{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)}, {"index.json", index},
		{"blobs/sha256/" + digest(lb)[7:], lb}, {"blobs/sha256/" + digest(config)[7:], config}, {"blobs/sha256/" + digest(manifest)[7:], manifest}} {
		if err := w.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.b)), Typeflag: tar.TypeReg}); err != nil {
			f.Close()
			return err
		}
		if _, err := w.Write(e.b); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
