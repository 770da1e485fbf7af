package wire

import (
	"testing"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// The values here are the ones the protos' comments document for other
// languages; a change to either must change both.
func TestNames(t *testing.T) {
	for _, tt := range []struct{ name, got, want string }{
		{"kv events", KVEventsSubject("vllm-agg", "backend"), "vllm-agg.backend.kv_cache_update"},
		{"load", LoadSubject("vllm-agg", "backend"), "vllm-agg.backend.load_metrics"},
		{"replica sync", ReplicaSyncSubject("dynamo"), "dynamo.router.replica_sync"},
		{"admission", AdmissionSubject("dynamo"), "dynamo.frontend.admission"},
		{"admission of every namespace", AdmissionSubject(""), "switchyard.frontend.admission"},
		{"kv filter", KVEventsFilter("dynamo"), "dynamo.*.kv_cache_update"},
		{"load filter", LoadFilter("dynamo"), "dynamo.*.load_metrics"},
		{"msg id", KVEventsMsgID(0x1f2e, 1, 42), "kv-1f2e-1-42"},
		{"core subject", CoreSubject(KVEventsSubject("vllm-agg", "backend")), "_core.vllm-agg.backend.kv_cache_update"},
		{"tokenizer object", TokenizerObject("Qwen/Qwen3-0.6B", "tokenizer.json"), "Qwen--Qwen3-0.6B/tokenizer.json"},
		{"tokenizer object with space", TokenizerObject("my model/x", "vocab.txt"), "my_model--x/vocab.txt"},
		{"event name", EventName("a.b.kv_cache_update"), "kv_cache_update"},
		{"event name without dots", EventName("x"), "x"},
		{"namespace", Namespace("a.b.c"), "a"},
		{"namespace without dots", Namespace("a"), "a"},
		{"kv type", TypeName(&workerv1.KvEventBatch{}), "switchyard.worker.v1.KvEventBatch"},
		{"load type", TypeName(&workerv1.LoadMetrics{}), "switchyard.worker.v1.LoadMetrics"},
		{"replica type", TypeName(&routerv1.ReplicaEvent{}), "switchyard.router.v1.ReplicaEvent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestCheckType(t *testing.T) {
	for _, tt := range []struct {
		name    string
		headers map[string]string
		ok      bool
	}{
		{"matching", TypeHeaders(&workerv1.KvEventBatch{}), true},
		{"no header", nil, true},
		{"other headers only", map[string]string{"X": "y"}, true},
		{"another type", TypeHeaders(&workerv1.LoadMetrics{}), false},
		{"not a proto name", map[string]string{HeaderType: "json"}, false},
		{"empty", map[string]string{HeaderType: ""}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckType(tt.headers, &workerv1.KvEventBatch{})
			if (err == nil) != tt.ok {
				t.Errorf("CheckType(%v) = %v, want ok=%v", tt.headers, err, tt.ok)
			}
		})
	}
	if err := CheckType(TypeHeaders(&registryv1.Instance{}), &registryv1.Instance{}); err != nil {
		t.Errorf("CheckType of its own headers: %v", err)
	}
}
