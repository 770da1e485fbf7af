package transport

import (
	"context"
	"errors"
	"io"
	"testing"
)

// TestOneClientCallsEveryPlane: a client configured for any plane calls
// servers of all three, each with the plane its address names, and one
// client of a single plane still refuses the others.
func TestOneClientCallsEveryPlane(t *testing.T) {
	natsCfg := testConfig(t, PlaneNATS)
	var addrs []Address
	for _, p := range []Plane{PlaneTCP, PlaneHTTP, PlaneNATS} {
		cfg := natsCfg
		cfg.Plane = p
		s := testServer(t, cfg, newTestHandlers())
		addrs = append(addrs, s.Address("echo"))
	}
	for _, own := range []Plane{PlaneTCP, PlaneHTTP, PlaneNATS} {
		t.Run("configured "+string(own), func(t *testing.T) {
			cfg := natsCfg
			cfg.Plane = own
			c := testClient(t, cfg)
			for _, a := range addrs {
				st, err := c.Call(context.Background(), a, "echo", Headers{HeaderRequestID: "r"}, []byte(a.Kind))
				if err != nil {
					t.Fatalf("call %s: %v", a, err)
				}
				got, err := recvAll(st)
				if err != io.EOF || len(got) != 1 || string(got[0]) != "r:"+string(a.Kind) {
					t.Fatalf("call %s: got %q, %v", a, got, err)
				}
			}
		})
	}
	single, err := NewPlaneClient(natsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	if _, err := single.Call(context.Background(), addrs[0], "echo", nil, nil); err == nil {
		t.Fatal("a nats-only client called a tcp address")
	}
	var unknown Address = Address{Kind: "carrier-pigeon", Addr: "x"}
	c := testClient(t, natsCfg)
	if _, err := c.Call(context.Background(), unknown, "echo", nil, nil); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("call of an unknown plane = %v, want an error naming it", err)
	}
}
