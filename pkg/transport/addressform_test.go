package transport

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// FuzzTransportAddress: an accepted address is one the request plane
// clients can use: a tcp one splits into a host and a numeric port, an http
// one parses as a URL or host:port, a nats one has no space or wildcard.
func FuzzTransportAddress(f *testing.F) {
	for _, a := range []string{"10.0.0.1:9999", "[::1]:1", "http://h:8888/v1/rpc", "https://h", "a.b.c", "not a host:port \x00", "h:65536", "a.*"} {
		f.Add(a)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		if validTCPAddr(addr) == nil {
			host, port, err := net.SplitHostPort(addr)
			if err != nil || host == "" || strings.ContainsAny(host, " \x00/") {
				t.Fatalf("tcp %q accepted: host %q port %q %v", addr, host, port, err)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				t.Fatalf("tcp %q accepted with port %q", addr, port)
			}
		}
		if validHTTPAddr(addr) == nil && strings.Contains(addr, "://") {
			u, err := url.Parse(addr)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
				t.Fatalf("http %q accepted: %v %v", addr, u, err)
			}
		}
		if validNATSSubject(addr) == nil && (addr == "" || strings.ContainsAny(addr, " \t\r\n*>") || strings.Contains(addr, "..")) {
			t.Fatalf("nats %q accepted", addr)
		}
	})
}

// TestAddressValidate: each plane checks its own address form, and an
// address of no plane is refused.
func TestAddressValidate(t *testing.T) {
	tests := []struct {
		addr Address
		ok   bool
	}{
		{Address{Kind: PlaneTCP, Addr: "10.0.0.1:9999"}, true},
		{Address{Kind: PlaneTCP, Addr: "http://h:1"}, false},
		{Address{Kind: PlaneHTTP, Addr: "http://h:8888/v1/rpc"}, true},
		{Address{Kind: PlaneHTTP, Addr: "h:8888"}, true},
		{Address{Kind: PlaneHTTP, Addr: "ftp://h"}, false},
		{Address{Kind: PlaneNATS, Addr: "ns.comp.ep.1f"}, true},
		{Address{Kind: PlaneNATS, Addr: "ns.*"}, false},
		{Address{Kind: "udp", Addr: "h:1"}, false},
		{Address{Kind: "TCP", Addr: "h:1"}, false},
	}
	for _, tt := range tests {
		if err := tt.addr.Validate(); (err == nil) != tt.ok {
			t.Errorf("%v.Validate() = %v, want ok %v", tt.addr, err, tt.ok)
		}
	}
}

// TestPlanesTable: every plane is listed once, named as DYN_REQUEST_PLANE
// takes it, and its address round-trips through a registered Transport.
func TestPlanesTable(t *testing.T) {
	if got := PlaneNames(); got != "tcp, http, nats" {
		t.Fatalf("PlaneNames() = %q", got)
	}
	for i, p := range Planes() {
		if parsed, err := ParsePlane(strings.ToUpper(string(p))); err != nil || parsed != p {
			t.Errorf("ParsePlane(%q) = %q, %v", strings.ToUpper(string(p)), parsed, err)
		}
		a := Address{Kind: p, Addr: "a" + strconv.Itoa(i)}
		if got := AddressesOf(TransportOf(a)); len(got) != 1 || got[0] != a {
			t.Errorf("%s address round trip: %v", p, got)
		}
	}
	all := make([]Address, 0, len(Planes()))
	for _, p := range Planes() {
		all = append(all, Address{Kind: p, Addr: "x." + string(p)})
	}
	if got := AddressesOf(TransportOf(all...)); len(got) != len(all) {
		t.Errorf("AddressesOf(TransportOf(%v)) = %v", all, got)
	}
}
