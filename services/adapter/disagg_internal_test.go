package adapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// vllmParams are kv_transfer_params as vLLM's NixlConnector returns them,
// padded with a filler field to n bytes when n > 0.
func vllmParams(n int) string {
	s := `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],"remote_engine_id":"e0","remote_request_id":"r","remote_host":"10.0.0.1","remote_port":5600,"tp_size":1,"pad":""}`
	if n > 0 {
		s = strings.Replace(s, `"pad":""`, `"pad":"`+strings.Repeat("x", n-len(s))+`"`, 1)
	}
	return s
}

// TestDecodeVLLMHandoff: vLLM's params are relayed as they are when they
// carry what the decode engine needs; the size limit at and past it.
func TestDecodeVLLMHandoff(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		ok      bool
	}{
		{"nixl's params", vllmParams(0), true},
		{"block ids per KV cache group", `{"do_remote_prefill":true,"remote_block_ids":[[1,2],[3]],"remote_engine_id":"e","remote_host":"h","remote_port":1}`, true},
		{"at the limit", vllmParams(worker.MaxHandoffPayload), true},
		{"past the limit", vllmParams(worker.MaxHandoffPayload + 1), false},
		{"not JSON", `{"do_remote_prefill":`, false},
		{"not an object", `[1,2]`, false},
		{"null", `null`, false},
		{"two objects", vllmParams(0) + vllmParams(0), false},
		{"the prefill's own params", `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`, false},
		{"no engine id", `{"do_remote_prefill":true,"remote_block_ids":[1],"remote_host":"h","remote_port":1}`, false},
		{"block ids not a list", `{"do_remote_prefill":true,"remote_block_ids":7,"remote_engine_id":"e","remote_host":"h","remote_port":1}`, false},
		{"no host", `{"do_remote_prefill":true,"remote_block_ids":[1],"remote_engine_id":"e","remote_port":1}`, false},
		{"port 0", `{"do_remote_prefill":true,"remote_block_ids":[1],"remote_engine_id":"e","remote_host":"h","remote_port":0}`, false},
		{"port past 65535", `{"do_remote_prefill":true,"remote_block_ids":[1],"remote_engine_id":"e","remote_host":"h","remote_port":65536}`, false},
		{"port as text", `{"do_remote_prefill":true,"remote_block_ids":[1],"remote_engine_id":"e","remote_host":"h","remote_port":"80"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeVLLMHandoff([]byte(tt.payload))
			if tt.ok != (err == nil) || err != nil && !errors.Is(err, worker.ErrInvalidHandoff) {
				t.Fatalf("decodeVLLMHandoff: %v, want ok %v", err, tt.ok)
			}
			if tt.ok && string(got) != tt.payload {
				t.Fatal("the params are not relayed as they are")
			}
		})
	}
}

// TestDecodeBootstrapHandoff: SGLang's three fields, each in its range.
func TestDecodeBootstrapHandoff(t *testing.T) {
	tests := []struct {
		payload string
		want    *bootstrapHandoff
	}{
		{`{"bootstrap_host":"10.0.0.2","bootstrap_port":8998,"bootstrap_room":42}`, &bootstrapHandoff{"10.0.0.2", 8998, 42}},
		{`{"bootstrap_host":"h","bootstrap_port":65535,"bootstrap_room":9223372036854775807}`, &bootstrapHandoff{"h", 65535, 1<<63 - 1}},
		{`{"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":9223372036854775808}`, nil},
		{`{"bootstrap_host":"h","bootstrap_port":65536,"bootstrap_room":1}`, nil},
		{`{"bootstrap_host":"h","bootstrap_port":0,"bootstrap_room":1}`, nil},
		{`{"bootstrap_host":"","bootstrap_port":1,"bootstrap_room":1}`, nil},
		{`{"bootstrap_port":1,"bootstrap_room":1}`, nil},
		{`{"bootstrap_host":"h","bootstrap_port":1}`, nil},
		{`{"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":-1}`, nil},
		{`{"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":1}{}`, nil},
		{`[]`, nil},
		{fmt.Sprintf(`{"bootstrap_host":"%s","bootstrap_port":1,"bootstrap_room":1}`, strings.Repeat("h", worker.MaxHandoffPayload)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.payload[:min(len(tt.payload), 60)], func(t *testing.T) {
			got, err := decodeBootstrapHandoff([]byte(tt.payload))
			if tt.want == nil {
				if !errors.Is(err, worker.ErrInvalidHandoff) {
					t.Fatalf("decodeBootstrapHandoff = %+v, %v; want ErrInvalidHandoff", got, err)
				}
				return
			}
			if err != nil || got != *tt.want {
				t.Fatalf("decodeBootstrapHandoff = %+v, %v; want %+v", got, err, *tt.want)
			}
		})
	}
}

// FuzzDecodeHandoffs: any payload is accepted or refused with
// ErrInvalidHandoff by both decoders; what is accepted meets the checks and
// a bootstrap handoff survives a round trip.
func FuzzDecodeHandoffs(f *testing.F) {
	f.Add([]byte(vllmParams(0)))
	f.Add([]byte(`{"do_remote_prefill":true,"remote_block_ids":[[1],[2]],"remote_engine_id":"e","remote_host":"h","remote_port":1}`))
	f.Add([]byte(`{"bootstrap_host":"10.0.0.2","bootstrap_port":8998,"bootstrap_room":42}`))
	f.Add([]byte(`{"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":9223372036854775808}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		if p, err := decodeVLLMHandoff(payload); err != nil {
			if !errors.Is(err, worker.ErrInvalidHandoff) {
				t.Fatalf("vLLM: %v is not ErrInvalidHandoff", err)
			}
		} else {
			var obj map[string]any
			if len(p) > worker.MaxHandoffPayload || json.Unmarshal(p, &obj) != nil || obj["do_remote_prefill"] != true {
				t.Fatalf("vLLM: accepted %q", p)
			}
		}
		h, err := decodeBootstrapHandoff(payload)
		if err != nil {
			if !errors.Is(err, worker.ErrInvalidHandoff) {
				t.Fatalf("bootstrap: %v is not ErrInvalidHandoff", err)
			}
			return
		}
		if h.Host == "" || h.Port < 1 || h.Port > 65535 || h.Room > 1<<63-1 {
			t.Fatalf("bootstrap: accepted %+v", h)
		}
		b, _ := json.Marshal(h)
		if again, err := decodeBootstrapHandoff(b); err != nil || again != h {
			t.Fatalf("bootstrap round trip: %+v, %v", again, err)
		}
	})
}
