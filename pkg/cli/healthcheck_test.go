package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
)

// grpcConfig has the flags of a gRPC service (as pkg/grpcserver registers
// them), httpConfig those of the frontend, workerConfig none of either.
type grpcConfig struct{ tls tlsconfig.Config }

func (c *grpcConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.String("grpc-addr", ":7001", "")
	c.tls.RegisterFlags(fs)
}
func (c *grpcConfig) Complete() error { return nil }
func (c *grpcConfig) Validate() error { return nil }

type httpConfig struct{}

func (httpConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Int("http-port", 8000, "")
	fs.String("http-addr", "", "")
}
func (httpConfig) Complete() error { return nil }
func (httpConfig) Validate() error { return nil }

type workerConfig struct{}

func (workerConfig) RegisterFlags(*flag.FlagSet) {}
func (workerConfig) Complete() error             { return nil }
func (workerConfig) Validate() error             { return nil }

// runCheck runs `t healthcheck args...` through Main and returns the exit
// code and output; run must not be reached.
func runCheck(t *testing.T, cfg Config, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := Main(Options{Name: "t", EnvPrefix: "T_"}, cfg, append([]string{HealthCheckCommand}, args...), &out,
		func(context.Context, *slog.Logger) error {
			t.Fatal("healthcheck ran the service")
			return nil
		})
	return code, out.String()
}

func serveHealth(t *testing.T, creds credentials.TransportCredentials) (string, *health.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), hs
}

func TestHealthCheckGRPC(t *testing.T) {
	addr, hs := serveHealth(t, nil)
	if code, out := runCheck(t, &grpcConfig{}, "--grpc-addr="+addr); code != 0 {
		t.Fatalf("serving: exit %d, want 0: %s", code, out)
	}
	// The environment fills the flags, as for the service itself.
	t.Setenv("T_GRPC_ADDR", addr)
	if code, out := runCheck(t, &grpcConfig{}); code != 0 {
		t.Fatalf("address from T_GRPC_ADDR: exit %d, want 0: %s", code, out)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if code, out := runCheck(t, &grpcConfig{}); code != 1 || !strings.Contains(out, "NOT_SERVING") {
		t.Fatalf("not serving: exit %d, want 1 naming NOT_SERVING: %s", code, out)
	}
	_, port, _ := net.SplitHostPort(closedAddr(t))
	if code, _ := runCheck(t, &grpcConfig{}, "--grpc-addr=:"+port); code != 1 {
		t.Fatalf("nothing listening: exit %d, want 1", code)
	}
}

// TestHealthCheckGRPCMutualTLS: a server that requires client certificates,
// with a certificate that names a Service and not 127.0.0.1, is probed with
// the process's own identity and verified against the name in it.
func TestHealthCheckGRPCMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeServiceCert(t, dir, "sy-switchyard-registry")
	srvTLS, err := tlsconfig.Config{CertFile: cert, KeyFile: key, CAFile: ca}.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serveHealth(t, credentials.NewTLS(srvTLS))
	args := []string{"--grpc-addr=" + addr, "--tls-cert=" + cert, "--tls-key=" + key, "--tls-ca=" + ca}
	if code, out := runCheck(t, &grpcConfig{}, args...); code != 0 {
		t.Fatalf("mutual TLS: exit %d, want 0: %s", code, out)
	}
	if code, _ := runCheck(t, &grpcConfig{}, "--grpc-addr="+addr); code != 1 {
		t.Fatalf("plaintext against TLS: exit %d, want 1", code)
	}
	if code, _ := runCheck(t, &grpcConfig{}, append(args, "--tls-server-name=other")...); code != 1 {
		t.Fatalf("wrong server name: exit %d, want 1", code)
	}
}

func TestHealthCheckHTTP(t *testing.T) {
	status := http.StatusServiceUnavailable
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	if code, out := runCheck(t, httpConfig{}, "--http-addr="+addr); code != 1 || !strings.Contains(out, "503") {
		t.Fatalf("503: exit %d, want 1 naming the status: %s", code, out)
	}
	status = http.StatusOK
	_, port, _ := net.SplitHostPort(addr)
	if code, out := runCheck(t, httpConfig{}, "--http-port="+port); code != 0 {
		t.Fatalf("200 on --http-port: exit %d, want 0: %s", code, out)
	}
}

func TestHealthCheckWorker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	t.Setenv("DYN_TCP_RPC_PORT", port)
	if code, out := runCheck(t, workerConfig{}); code != 0 {
		t.Fatalf("request plane listening: exit %d, want 0: %s", code, out)
	}
	t.Setenv("DYN_REQUEST_PLANE", "http")
	t.Setenv("DYN_HTTP_RPC_PORT", port)
	if code, out := runCheck(t, workerConfig{}); code != 0 {
		t.Fatalf("http plane listening: exit %d, want 0: %s", code, out)
	}
	_, closed, _ := net.SplitHostPort(closedAddr(t))
	t.Setenv("DYN_HTTP_RPC_PORT", closed)
	if code, _ := runCheck(t, workerConfig{}); code != 1 {
		t.Fatalf("nothing listening: exit %d, want 1", code)
	}
	t.Setenv("DYN_REQUEST_PLANE", "tcp")
	t.Setenv("DYN_TCP_RPC_PORT", "0")
	if code, out := runCheck(t, workerConfig{}); code != 1 || !strings.Contains(out, "OS-assigned") {
		t.Fatalf("port 0: exit %d, want 1 saying why: %s", code, out)
	}
}

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	code := Main(Options{Name: "t"}, workerConfig{}, []string{"--version"}, &out, func(context.Context, *slog.Logger) error {
		t.Fatal("--version ran the service")
		return nil
	})
	if code != 0 || !strings.HasPrefix(out.String(), "t ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("--version: exit %d, output %q; want 0 and the name, version and Go version", code, out.String())
	}
}

func TestLocalAddr(t *testing.T) {
	for in, want := range map[string]string{
		":7001":          "127.0.0.1:7001",
		"0.0.0.0:7001":   "127.0.0.1:7001",
		"[::]:7001":      "127.0.0.1:7001",
		"10.0.0.5:7001":  "10.0.0.5:7001",
		"localhost:7001": "localhost:7001",
	} {
		if got := localAddr(in); got != want {
			t.Errorf("localAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// closedAddr is a loopback address that refuses connections, held for the
// test so that no other process's listener takes it (see testport.Refusing).
func closedAddr(t *testing.T) string {
	t.Helper()
	return testport.Refusing(t)
}

// writeServiceCert writes a CA and a certificate for both server and client
// authentication that names only the Service name (what cert-manager issues
// for a Kubernetes Service), and returns the CA, cert and key files.
func writeServiceCert(t *testing.T, dir, name string) (caFile, certFile, keyFile string) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{name, name + ".sy.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for path, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}
