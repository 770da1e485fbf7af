package registry

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

func TestTTLLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   int64
		want time.Duration
		ok   bool
	}{
		{0, 10 * time.Second, true},
		{1, time.Second, true},
		{300, 300 * time.Second, true},
		{301, 0, false},
		{-1, 0, false},
	}
	for _, tt := range tests {
		got, err := ttlOf(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ttlOf(%d) = %v, %v; want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestMetadataLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		md   map[string]string
		ok   bool
	}{
		{"exactly 64 KiB", map[string]string{"k": strings.Repeat("x", MaxMetadata-1)}, true},
		{"one byte over", map[string]string{"k": strings.Repeat("x", MaxMetadata)}, false},
		{"empty key", map[string]string{"": "v"}, false},
		{"invalid UTF-8", map[string]string{"k": "\xff"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validMetadata(tt.md)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Fatalf("validMetadata = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestNameLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v  string
		ok bool
	}{
		{"a", true}, {"0abc_def-1", true}, {strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false}, {"", false}, {"_a", false}, {"A", false}, {"a.b", false}, {"a b", false},
	}
	for _, tt := range tests {
		if err := validName("namespace", tt.v); (err == nil) != tt.ok {
			t.Errorf("validName(%q) = %v, want ok=%v", tt.v, err, tt.ok)
		}
	}
}

func TestKeyAndValueLimits(t *testing.T) {
	t.Parallel()
	if err := validKey(strings.Repeat("k", MaxKeyLen)); err != nil {
		t.Errorf("key at the limit: %v", err)
	}
	if err := validKey(strings.Repeat("k", MaxKeyLen+1)); err == nil {
		t.Error("key over the limit accepted")
	}
	if err := validValue(make([]byte, MaxValueLen)); err != nil {
		t.Errorf("value at the limit: %v", err)
	}
	if err := validValue(make([]byte, MaxValueLen+1)); err == nil {
		t.Error("value over the limit accepted")
	}
	if _, err := lockWait(MaxLockWait.Milliseconds()); err != nil {
		t.Errorf("lock wait at the limit: %v", err)
	}
}

func TestFilterPrefix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		names []string
		want  string
	}{
		{nil, "/services/"},
		{[]string{"a"}, "/services/a/"},
		{[]string{"a", "b", ""}, "/services/a/b/"},
		{[]string{"a", "b", "c"}, "/services/a/b/c/"},
	}
	for _, tt := range tests {
		if got := filterPrefix(servicesPrefix, tt.names...); got != tt.want {
			t.Errorf("filterPrefix(%v) = %q, want %q", tt.names, got, tt.want)
		}
	}
}

func TestValidatePod(t *testing.T) {
	t.Parallel()
	const uid = "6f1b3c1e-0d1c-4f6a-9a57-2b0e8f9d1a10"
	tests := []struct {
		name string
		pod  *registryv1.KubernetesPod
		ok   bool
	}{
		{"none", nil, true},
		{"complete", &registryv1.KubernetesPod{Name: "vllm-worker-7d9c-x2x4z", Namespace: "dynamo", Uid: uid}, true},
		{"dotted name", &registryv1.KubernetesPod{Name: "worker.0", Namespace: "dynamo", Uid: uid}, true},
		{"missing uid", &registryv1.KubernetesPod{Name: "w", Namespace: "dynamo"}, false},
		{"missing namespace", &registryv1.KubernetesPod{Name: "w", Uid: uid}, false},
		{"upper-case name", &registryv1.KubernetesPod{Name: "Worker", Namespace: "dynamo", Uid: uid}, false},
		{"dotted namespace", &registryv1.KubernetesPod{Name: "w", Namespace: "a.b", Uid: uid}, false},
		{"long namespace", &registryv1.KubernetesPod{Name: "w", Namespace: strings.Repeat("a", 64), Uid: uid}, false},
		{"slash in uid", &registryv1.KubernetesPod{Name: "w", Namespace: "dynamo", Uid: "a/b"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validatePod(tt.pod)
			if (err == nil) != tt.ok {
				t.Fatalf("validatePod(%v) = %v, want ok=%v", tt.pod, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
		})
	}
}

func TestTransportAddresses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind, addr string
		ok         bool
	}{
		{"tcp", "10.0.0.1:9999", true},
		{"tcp", "worker-0.backend.svc.cluster.local:7000", true},
		{"tcp", "[::1]:7000", true},
		{"tcp", "not a host:port \x00", false},
		{"tcp", "10.0.0.1", false},
		{"tcp", ":7000", false},
		{"tcp", "h:0", false},
		{"tcp", "h:65536", false},
		{"tcp", "h:07000", false},
		{"tcp", "h:x", false},
		{"tcp", "-h:1", false},
		{"tcp", "h\x00:1", false},
		{"http", "http://10.0.0.1:8888/v1/rpc", true},
		{"http", "https://worker-0:8443", true},
		{"http", "http://worker-0/v1/rpc", true},
		{"http", "10.0.0.1:8888", true},
		{"http", "ftp://10.0.0.1:8888", false},
		{"http", "http://:8888/v1/rpc", false},
		{"http", "http://h:/v1/rpc", false},
		{"http", "http://u:p@h:1/", false},
		{"http", "http://h:1/?q=1", false},
		{"http", "http://h h:1/", false},
		{"nats", "dynamo.backend.generate-3a7c", true},
		{"nats", "_INBOX.x", true},
		{"nats", "a..b", false},
		{"nats", ".a", false},
		{"nats", "a.*", false},
		{"nats", "a.>", false},
		{"nats", "a b", false},
		{"nats", "a\tb", false},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+tt.addr, func(t *testing.T) {
			tr := &commonv1.Transport{}
			switch tt.kind {
			case "tcp":
				tr.Tcp = tt.addr
			case "http":
				tr.Http = tt.addr
			case "nats":
				tr.Nats = tt.addr
			}
			err := validTransport(tr)
			if (err == nil) != tt.ok {
				t.Fatalf("validTransport(%s %q) = %v, want ok=%v", tt.kind, tt.addr, err, tt.ok)
			}
			if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "instance.transport."+tt.kind)) {
				t.Fatalf("error %q is not ErrInvalid naming instance.transport.%s", err, tt.kind)
			}
		})
	}
}

// TestValidatorLimits: each size limit of the validators takes a value of
// exactly the limit and refuses one byte (or one element) more, with
// ErrInvalid.
func TestValidatorLimits(t *testing.T) {
	t.Parallel()
	card := func(name string, artifacts int) *registryv1.ModelCard {
		c := &registryv1.ModelCard{Namespace: "ns", Component: "c", Endpoint: "e", ModelName: name, BlockSize: 16}
		for i := range artifacts {
			c.Tokenizer = append(c.Tokenizer, &registryv1.TokenizerArtifact{Name: "f" + strings.Repeat("x", i), Sha256: strings.Repeat("ab", 32)})
		}
		return c
	}
	tests := []struct {
		name  string
		check func(n int) error
		limit int
	}{
		{"name (maxNameLen)", func(n int) error { return validName("namespace", strings.Repeat("a", n)) }, maxNameLen},
		{"nats address (MaxAddress)", func(n int) error {
			return validTransport(&commonv1.Transport{Nats: strings.Repeat("a", n)})
		}, MaxAddress},
		{"card model name (MaxModelName)", func(n int) error { return validateCard(card(strings.Repeat("m", n), 1)) }, MaxModelName},
		{"filter model name (MaxModelName)", func(n int) error {
			return validateModelFilter(&registryv1.ModelFilter{ModelName: strings.Repeat("m", n)})
		}, MaxModelName},
		{"tokenizer artifacts (MaxArtifacts)", func(n int) error { return validateCard(card("m", n)) }, MaxArtifacts},
		{"kv transfer engine id (MaxEngineID)", func(n int) error {
			return validDisaggregation(commonv1.Role_ROLE_PREFILL, &commonv1.KvTransfer{EngineId: strings.Repeat("e", n)})
		}, MaxEngineID},
		{"LoRA adapters (MaxLoraAdapters)", func(n int) error {
			c := card("m", 1)
			for i := range n {
				c.LoraAdapters = append(c.LoraAdapters, &registryv1.LoraAdapter{Name: fmt.Sprint("lora-", i)})
			}
			return validateCard(c)
		}, MaxLoraAdapters},
		{"max_loras (MaxLoraAdapters)", func(n int) error {
			c := card("m", 1)
			c.MaxLoras = uint32(n)
			return validateCard(c)
		}, MaxLoraAdapters},
		{"LoRA adapter name (MaxModelName)", func(n int) error {
			c := card("m", 1)
			c.LoraAdapters = []*registryv1.LoraAdapter{{Name: strings.Repeat("l", n)}}
			return validateCard(c)
		}, MaxModelName},
		{"LoRA adapter path (MaxLoraPath)", func(n int) error {
			c := card("m", 1)
			c.LoraAdapters = []*registryv1.LoraAdapter{{Name: "l", Path: strings.Repeat("p", n)}}
			return validateCard(c)
		}, MaxLoraPath},
		{"card data-parallel size (MaxDataParallelSize)", func(n int) error {
			c := card("m", 1)
			c.DataParallelSize = uint32(n)
			return validateCard(c)
		}, MaxDataParallelSize},
		{"kv transfer data-parallel size (MaxDataParallelSize)", func(n int) error {
			return validDisaggregation(commonv1.Role_ROLE_DECODE, &commonv1.KvTransfer{DataParallelSize: uint32(n)})
		}, MaxDataParallelSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(tc.limit); err != nil {
				t.Fatalf("at the limit %d: %v", tc.limit, err)
			}
			if err := tc.check(tc.limit + 1); !errors.Is(err, ErrInvalid) {
				t.Fatalf("one over the limit %d: %v; want ErrInvalid", tc.limit, err)
			}
		})
	}
}
