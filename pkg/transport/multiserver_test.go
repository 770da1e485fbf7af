package transport

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestServerOnSeveralPlanes: a server configured with DYN_REQUEST_PLANE
// tcp,http,nats serves the same handlers on each plane and reports every
// address; a client of each single plane reaches it on its own plane, and
// Drain then Close stop all three.
func TestServerOnSeveralPlanes(t *testing.T) {
	env := map[string]string{"DYN_REQUEST_PLANE": "TCP, http,nats"}
	cfg, err := ConfigFromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Plane != PlaneTCP || len(cfg.ServedPlanes()) != 3 {
		t.Fatalf("DYN_REQUEST_PLANE=%q: plane %s, serves %v", env["DYN_REQUEST_PLANE"], cfg.Plane, cfg.ServedPlanes())
	}
	base := testConfig(t, PlaneNATS)
	cfg.TCP, cfg.HTTP, cfg.NATS = base.TCP, base.HTTP, base.NATS
	s := testServer(t, cfg, newTestHandlers())
	addrs := s.Addresses("echo")
	if len(addrs) != 3 || addrs[0] != s.Address("echo") {
		t.Fatalf("Addresses = %v; want three, the first Address's (%v)", addrs, s.Address("echo"))
	}
	tr := TransportOf(addrs...)
	for i, p := range []Plane{PlaneTCP, PlaneHTTP, PlaneNATS} {
		if addrs[i].Kind != p {
			t.Fatalf("address %d = %v; want plane %s", i, addrs[i], p)
		}
		t.Run("client on "+string(p), func(t *testing.T) {
			pc := base
			pc.Plane = p
			c, err := NewPlaneClient(pc)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			a, ok := Pick(tr, p)
			if !ok || a.Kind != p {
				t.Fatalf("Pick(%v, %s) = %v, %v", tr, p, a, ok)
			}
			st, err := c.Call(context.Background(), a, "echo", Headers{HeaderRequestID: "r"}, []byte(p))
			if err != nil {
				t.Fatal(err)
			}
			got, err := recvAll(st)
			if err != io.EOF || len(got) != 1 || string(got[0]) != "r:"+string(p) {
				t.Fatalf("echo on %s = %q, %v", p, got, err)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

func TestParsePlanes(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    []Plane
		wantErr string
	}{
		{"tcp", []Plane{PlaneTCP}, ""},
		{"tcp,http", []Plane{PlaneTCP, PlaneHTTP}, ""},
		{" HTTP , nats ", []Plane{PlaneHTTP, PlaneNATS}, ""},
		{"tcp,tcp", nil, "twice"},
		{"tcp,", nil, "unknown request plane"},
		{"tcp,udp", nil, "unknown request plane"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePlanes(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePlanes(%q) = %v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != len(tt.want) {
				t.Fatalf("ParsePlanes(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("ParsePlanes(%q) = %v; want %v", tt.in, got, tt.want)
				}
			}
		})
	}
	env := map[string]string{"DYN_REQUEST_PLANE": "tcp,tcp"}
	if _, err := ConfigFromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil || !strings.Contains(err.Error(), "DYN_REQUEST_PLANE") {
		t.Fatalf("DYN_REQUEST_PLANE=tcp,tcp: %v; want an error naming the variable", err)
	}
	bad := DefaultConfig()
	bad.Planes = []Plane{PlaneHTTP, PlaneTCP}
	if err := bad.Validate(); err == nil {
		t.Fatal("Validate accepted Planes that do not start with Plane")
	}
}
