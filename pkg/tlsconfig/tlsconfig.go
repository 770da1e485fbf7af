// Package tlsconfig turns the --tls-cert, --tls-key and --tls-ca flags every
// Switchyard process shares into gRPC transport credentials for servers and
// clients. No flags means plaintext (the laptop default); a CA on a server
// means mutual TLS: clients must present a certificate it signed.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Config names the PEM files of a process's TLS identity and trust.
type Config struct {
	// CertFile and KeyFile are this process's certificate and private key: a
	// server's identity, or a client's for mutual TLS.
	CertFile string
	KeyFile  string
	// CAFile verifies the peer: on a server it turns on mutual TLS; on a client
	// it replaces the system roots.
	CAFile string
	// ServerName overrides the name a client checks in the server certificate.
	ServerName string
	// flags is how Complete and Validate name the files' flags: "--tls"
	// when empty, "--client-tls" once RegisterClientFlags filled them.
	flags string
}

// RegisterFlags adds --tls-cert, --tls-key, --tls-ca and --tls-server-name.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CertFile, "tls-cert", "", "PEM certificate of this process (server identity, or client identity for mutual TLS)")
	fs.StringVar(&c.KeyFile, "tls-key", "", "PEM private key for --tls-cert")
	fs.StringVar(&c.CAFile, "tls-ca", "", "PEM CA bundle that verifies peers; on a server it requires client certificates (mutual TLS)")
	fs.StringVar(&c.ServerName, "tls-server-name", "", "server name clients verify, when it differs from the dialled host")
}

// RegisterClientFlags adds --client-tls-cert, --client-tls-key and
// --client-tls-ca: the certificate a process presents to the services it
// calls (peers, as "the registry and eventbus") and the CA it verifies them
// with; a server's own identity is on the --tls-* flags.
func (c *Config) RegisterClientFlags(fs *flag.FlagSet, peers string) {
	c.flags = "--client-tls"
	fs.StringVar(&c.CertFile, "client-tls-cert", "", "client certificate for "+peers+" (mutual TLS)")
	fs.StringVar(&c.KeyFile, "client-tls-key", "", "client key for --client-tls-cert")
	fs.StringVar(&c.CAFile, "client-tls-ca", "", "CA that verifies "+peers)
}

// Enabled reports whether any TLS setting is present.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// Complete checks that the files named are there (the one step that reads
// the file system); the credentials load them at start.
func (c Config) Complete() error {
	p := c.flagPrefix()
	for _, f := range []struct{ flag, path string }{{p + "-cert", c.CertFile}, {p + "-key", c.KeyFile}, {p + "-ca", c.CAFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	return nil
}

// Validate checks that the settings fit together; it reads nothing.
func (c Config) Validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		p := c.flagPrefix()
		return fmt.Errorf("%s-cert and %s-key must be given together", p, p)
	}
	return nil
}

func (c Config) flagPrefix() string {
	if c.flags == "" {
		return "--tls"
	}
	return c.flags
}

// ServerTLS returns the server's tls.Config, or nil for plaintext.
func (c Config) ServerTLS() (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if c.CertFile == "" {
		return nil, errors.New("a TLS server needs --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load server key pair: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLS returns a client's tls.Config, or nil for plaintext.
func (c Config) ClientTLS() (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client key pair: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ServerCredentials returns gRPC server credentials: TLS, or insecure.
func (c Config) ServerCredentials() (credentials.TransportCredentials, error) {
	cfg, err := c.ServerTLS()
	if err != nil || cfg == nil {
		return insecure.NewCredentials(), err
	}
	return credentials.NewTLS(cfg), nil
}

// ClientCredentials returns gRPC client credentials: TLS, or insecure.
func (c Config) ClientCredentials() (credentials.TransportCredentials, error) {
	cfg, err := c.ClientTLS()
	if err != nil || cfg == nil {
		return insecure.NewCredentials(), err
	}
	return credentials.NewTLS(cfg), nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	return pool, nil
}
