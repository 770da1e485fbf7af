// Package tlsconfigtest writes throwaway certificates for tests of TLS
// and mutual TLS: a CA, a server certificate for localhost and 127.0.0.1,
// and a client certificate. It is kept out of package tlsconfig so that no
// service binary links test key generation.
package tlsconfigtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
)

// Files are PEM files made by Write: a CA, a server certificate
// for localhost and 127.0.0.1, and a client certificate, all signed by the CA.
type Files struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// Server returns the server side of a mutual TLS setup.
func (f Files) Server() tlsconfig.Config {
	return tlsconfig.Config{CertFile: f.ServerCert, KeyFile: f.ServerKey, CAFile: f.CA}
}

// Client returns the client side of a mutual TLS setup.
func (f Files) Client() tlsconfig.Config {
	return tlsconfig.Config{CertFile: f.ClientCert, KeyFile: f.ClientKey, CAFile: f.CA}
}

// Write writes a fresh CA and certificates into dir, for tests and
// for trying TLS on a laptop. The keys are short-lived and never for
// production.
func Write(dir string) (Files, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "switchyard test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Files{}, err
	}
	f := Files{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return Files{}, err
	}
	leaf := func(serial int64, usage x509.ExtKeyUsage, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: "localhost"},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyPath, "EC PRIVATE KEY", keyDER)
	}
	if err := leaf(2, x509.ExtKeyUsageServerAuth, f.ServerCert, f.ServerKey); err != nil {
		return Files{}, err
	}
	if err := leaf(3, x509.ExtKeyUsageClientAuth, f.ClientCert, f.ClientKey); err != nil {
		return Files{}, err
	}
	return f, nil
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
