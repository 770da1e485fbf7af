package grpcserver

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestDebugAddrServesPprofOnLoopback(t *testing.T) {
	off := start(t, Config{})
	if off.DebugAddr() != nil {
		t.Fatalf("pprof served without --debug-addr: %v", off.DebugAddr())
	}
	// A port without a host binds loopback only.
	s := start(t, Config{DebugAddr: ":0"})
	host, _, err := net.SplitHostPort(s.DebugAddr().String())
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("debug server on %v (%v), want 127.0.0.1", s.DebugAddr(), err)
	}
	for path, want := range map[string]string{"/debug/pprof/": "goroutine", "/debug/pprof/goroutine?debug=1": "goroutine profile"} {
		resp, err := http.Get("http://" + s.DebugAddr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
	if err := (Config{GRPCAddr: ":0", DebugAddr: "nonsense"}).Validate(); err == nil || !strings.Contains(err.Error(), "--debug-addr") {
		t.Fatalf("Validate of a bad --debug-addr: %v", err)
	}
}
