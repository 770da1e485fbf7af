package transport

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// The address forms of the request planes, which the registry checks where
// an address enters, at Register: an address that no client could dial
// would otherwise sit in etcd and be handed to every router and frontend,
// each of which would fail on it for as long as the lease lives (a
// "host:port" of "\x00", say). The rules are those of this package's
// clients.

// Validate checks that a's address has the form of its plane's addresses;
// an unknown plane is an error too.
func (a Address) Validate() error {
	p, ok := planeOf(a.Kind)
	if !ok {
		return fmt.Errorf("unknown request plane %q (valid: %s)", a.Kind, validPlanes)
	}
	return p.validate(a.Addr)
}

// ValidHostPort accepts host:port with a non-empty host (a name or an IP,
// IPv6 in brackets) and a port in 1..65535: a tcp plane address, and any
// other address dialled over TCP.
func ValidHostPort(addr string) error { return validTCPAddr(addr) }

// validTCPAddr accepts host:port with a non-empty host (a name or an IP, IPv6
// in brackets) and a port in 1..65535.
func validTCPAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not a host:port: %v", err)
	}
	if err := validHost(host); err != nil {
		return err
	}
	return validPort(port)
}

// validHTTPAddr accepts an http or https URL with a host (and optionally a
// port and a path), or a bare host:port.
func validHTTPAddr(addr string) error {
	if !strings.Contains(addr, "://") {
		return validTCPAddr(addr)
	}
	u, err := url.Parse(addr)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL scheme %q is not http or https", u.Scheme)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("URL has user info, a query, a fragment or an opaque part")
	}
	if err := validHost(u.Hostname()); err != nil {
		return err
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		return validPort(p)
	}
	return nil
}

// validNATSSubject accepts a NATS subject one can publish to: dot-separated
// non-empty tokens of printable ASCII without spaces or the wildcards * and >.
func validNATSSubject(subj string) error {
	for i, tok := range strings.Split(subj, ".") {
		if tok == "" {
			return fmt.Errorf("subject token %d is empty", i+1)
		}
		for j := 0; j < len(tok); j++ {
			c := tok[j]
			if c <= ' ' || c >= 0x7f || c == '*' || c == '>' {
				return fmt.Errorf("subject token %q has %q: only printable ASCII without spaces or wildcards", tok, c)
			}
		}
	}
	return nil
}

func validHost(host string) error {
	if host == "" {
		return fmt.Errorf("the host is empty")
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	// A DNS name (RFC 1123 labels; underscores tolerated, as resolvers do).
	if len(host) > 253 {
		return fmt.Errorf("host name is %d bytes, over 253", len(host))
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("host %q is not a valid name or IP", host)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host %q is not a valid name or IP", host)
			}
		}
	}
	return nil
}

func validPort(port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return nil
}
