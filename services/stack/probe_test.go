package stack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestProbes asks a real registry: it answers SERVING to grpcHealthy, and
// registered waits for model cards it does not have yet; an address with
// nothing behind it is not ready.
func TestProbes(t *testing.T) {
	_, reg := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := grpcHealthy(reg.Addr)(ctx); err != nil {
		t.Fatalf("grpcHealthy of a running registry: %v", err)
	}
	if err := registered(reg.Addr, 1)(ctx); err == nil || !strings.Contains(err.Error(), "0 of 1 workers") {
		t.Fatalf("registered with no model cards: %v, want 0 of 1 workers", err)
	}
	if err := registered(reg.Addr, 0)(ctx); err != nil {
		t.Fatalf("registered(0): %v", err)
	}
	if err := grpcHealthy("127.0.0.1:1")(ctx); err == nil {
		t.Fatal("grpcHealthy of a closed port succeeded")
	}
}
