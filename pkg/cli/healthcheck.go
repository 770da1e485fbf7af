package cli

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// HealthCheckCommand is the subcommand every binary answers with a probe of
// its own service, for images that have no shell or HTTP client (distroless,
// scratch) and for Kubernetes exec probes where the kubelet's gRPC probe
// cannot speak TLS: `<binary> healthcheck [the service's flags]`.
const HealthCheckCommand = "healthcheck"

// healthTimeout bounds one probe.
const healthTimeout = 3 * time.Second

// healthCheck probes the service that the flags in fs (already parsed and
// filled from the environment, as the service itself would be) describe:
//   - a gRPC service (--grpc-addr): grpc.health.v1 Check of the whole server
//     on the local address, with the service's own TLS identity;
//   - the frontend (--http-port, --http-addr): GET /health must answer 200;
//   - a worker: a TCP connection to its request-plane port (DYN_TCP_RPC_PORT,
//     or DYN_HTTP_RPC_PORT on the http plane).
func healthCheck(ctx context.Context, fs *flag.FlagSet) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	switch {
	case fs.Lookup("grpc-addr") != nil:
		return grpcHealth(ctx, localAddr(flagValue(fs, "grpc-addr")), tlsconfig.Config{
			CertFile:   flagValue(fs, "tls-cert"),
			KeyFile:    flagValue(fs, "tls-key"),
			CAFile:     flagValue(fs, "tls-ca"),
			ServerName: flagValue(fs, "tls-server-name"),
		})
	case fs.Lookup("http-port") != nil:
		addr := flagValue(fs, "http-addr")
		if addr == "" {
			addr = ":" + flagValue(fs, "http-port")
		}
		return httpHealth(ctx, "http://"+localAddr(addr)+"/health")
	}
	tc, err := transport.ConfigFromEnv()
	if err != nil {
		return err
	}
	host, port := tc.ListenAddress()
	if port == 0 {
		return errors.New("the request plane listens on an OS-assigned port (DYN_TCP_RPC_PORT=0): nothing to probe")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return conn.Close()
}

func flagValue(fs *flag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// localAddr turns a listen address (":7001", "0.0.0.0:7001") into one to
// dial on this machine.
func localAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func grpcHealth(ctx context.Context, addr string, tc tlsconfig.Config) error {
	if tc.Enabled() && tc.ServerName == "" {
		// The certificate names the Service, not 127.0.0.1: verify the
		// server against the name in this process's own certificate.
		tc.ServerName = certName(tc.CertFile)
	}
	creds, err := tc.ClientCredentials()
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer cc.Close()
	r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("gRPC health of %s: %w", addr, err)
	}
	if r.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("gRPC health of %s: %s", addr, r.Status)
	}
	return nil
}

// certName is the first DNS name (or IP) of the PEM certificate in path, or
// "" when there is none.
func certName(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return ""
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return ""
	}
	switch {
	case len(cert.DNSNames) > 0:
		return cert.DNSNames[0]
	case len(cert.IPAddresses) > 0:
		return cert.IPAddresses[0].String()
	}
	return cert.Subject.CommonName
}

func httpHealth(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
