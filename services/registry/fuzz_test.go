package registry

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// Validators and decoders must never panic, and whatever they accept must be
// storable: keys round-trip, values decode to what was encoded.

func FuzzValidateRegister(f *testing.F) {
	f.Add("vllm-agg", "backend", "generate", "tcp", "10.0.0.1:9999", int64(10), "k", "v", int32(0), int32(-1), "", "", uint32(0))
	f.Add("", "B", "a/b", "nats", "", int64(301), "", "", int32(5), int32(9), "", "", uint32(0))
	f.Add("a_b-1", "0", "x", "http", "http://h:1/v1/rpc", int64(-1), "\xff", "v", int32(1), int32(1), "e", "h:1", uint32(1))
	f.Add("a", "b", "c", "tcp", "h:1", int64(10), "k", "v", int32(2), int32(4), "engine-0", "10.0.0.1:8998", uint32(1024))
	f.Add("a", "b", "c", "tcp", "h:1", int64(10), "k", "v", int32(3), int32(3), "\xff", "no port", uint32(1025))
	f.Fuzz(func(t *testing.T, ns, comp, ep, kind, addr string, ttl int64, mk, mv string, role, tkind int32, engine, taddr string, dp uint32) {
		in := &registryv1.Instance{Namespace: ns, Component: comp, Endpoint: ep, Metadata: map[string]string{mk: mv}, Role: commonv1.Role(role)}
		if tkind >= 0 {
			in.KvTransfer = &commonv1.KvTransfer{Kind: commonv1.KvTransferKind(tkind), EngineId: engine, Address: taddr, DataParallelSize: dp}
		}
		if slices.Contains(transport.Planes(), transport.Plane(kind)) {
			in.Transport = transport.TransportOf(transport.Address{Kind: transport.Plane(kind), Addr: addr})
		}
		_, err := validateRegister(&registryv1.RegisterRequest{Instance: in, TtlSeconds: ttl})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("validation error %v is not ErrInvalid", err)
			}
			return
		}
		in.InstanceId = 0xabc
		key := instanceKey(ns, comp, ep, in.InstanceId)
		gns, gcomp, gep, id, err := parseEndpointKey(servicesPrefix, key)
		if err != nil || gns != ns || gcomp != comp || gep != ep || id != in.InstanceId {
			t.Fatalf("key %q of a valid instance does not round-trip: %v", key, err)
		}
		val, err := encodeInstance(in)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeInstance(val)
		if err != nil {
			t.Fatalf("decode of encoded %s: %v", val, err)
		}
		if got := transport.AddressesOf(back.Transport); len(got) != 1 || got[0] != (transport.Address{Kind: transport.Plane(kind), Addr: addr}) {
			t.Fatalf("transport round trip: got %v want %s=%q", got, kind, addr)
		}
		if back.Role != in.Role || !proto.Equal(back.KvTransfer, in.KvTransfer) {
			t.Fatalf("role or kv_transfer round trip: got %v %v want %v %v", back.Role, back.KvTransfer, in.Role, in.KvTransfer)
		}
	})
}

func FuzzDecodeInstance(f *testing.F) {
	f.Add([]byte(`{"namespace":"a","component":"b","endpoint":"c","instance_id":1,"transport":{"tcp":"h:1"}}`))
	f.Add([]byte(`{"transport":{"tcp":"h:1","nats":"x"}}`))
	f.Add([]byte(`{"transport":{"udp":"x"}}`))
	f.Add([]byte(`{"namespace":"a","component":"b","endpoint":"c","instance_id":1,"transport":{"tcp":"h:1"},"role":"prefill","kv_transfer":{"kind":"nixl","engine_id":"e","address":"h:2","data_parallel_size":2}}`))
	f.Add([]byte(`{"transport":{"tcp":"h:1"},"role":"both","kv_transfer":{"kind":"x"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := decodeInstance(data)
		if err != nil {
			return
		}
		if len(transport.AddressesOf(in.Transport)) == 0 {
			t.Fatalf("decoded %s without a transport", data)
		}
		val, err := encodeInstance(in)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeInstance(val)
		if err != nil || !proto.Equal(back, in) {
			t.Fatalf("%s decoded to %v, re-encoded as %s, decoded to %v (%v)", data, in, val, back, err)
		}
	})
}

func FuzzParseEndpointKey(f *testing.F) {
	f.Add("/services/a/b/c/1f")
	f.Add("/services/a/b/c/d/1f")
	f.Add("/services////")
	f.Add("/services/a/b/c/ffffffffffffffffff")
	f.Fuzz(func(t *testing.T, key string) {
		ns, comp, ep, id, err := parseEndpointKey(servicesPrefix, key)
		if err != nil {
			return
		}
		if strings.Contains(ns+comp+ep, "/") {
			t.Fatalf("parsed names contain a slash: %q %q %q", ns, comp, ep)
		}
		_ = id
	})
}

func FuzzParseToken(f *testing.F) {
	f.Add("index/writer/0123456789abcdef")
	f.Add("index/readers/0123456789abcdef")
	f.Add("../writer/0123456789abcdef")
	f.Add("a/b/c")
	f.Fuzz(func(t *testing.T, token string) {
		name, kind, n, err := parseToken(token)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("token error %v is not ErrInvalid", err)
			}
			return
		}
		if validName("name", name) != nil || (kind != "writer" && kind != "readers") || len(n) != 16 {
			t.Fatalf("accepted a malformed token %q", token)
		}
	})
}

func FuzzValidateKV(f *testing.F) {
	f.Add("bucket", "key/with/slashes", []byte("v"))
	f.Add("", "", []byte(nil))
	f.Add("b", "\x00", []byte("v"))
	f.Fuzz(func(t *testing.T, bucket, key string, value []byte) {
		err := validBucketKey(bucket, key)
		if err == nil {
			err = validValue(value)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v is not ErrInvalid", err)
		}
	})
}

func FuzzValidateCard(f *testing.F) {
	f.Add("ns", "c", "e", "Qwen/Qwen3-0.6B", uint32(16), "tokenizer.json", strings.Repeat("a", 64), "", "", "")
	f.Add("ns", "c", "e", "", uint32(0), "", "xyz", "", "", "")
	f.Add("ns", "c", "e", "m", uint32(16), "t", strings.Repeat("a", 64), "sql-lora", "sql-lora", "/adapters/sql")
	f.Add("ns", "c", "e", "m", uint32(16), "t", strings.Repeat("a", 64), "m", "a\nb", "")
	f.Fuzz(func(t *testing.T, ns, comp, ep, model string, block uint32, art, sum, lora1, lora2, path string) {
		c := &registryv1.ModelCard{Namespace: ns, Component: comp, Endpoint: ep, ModelName: model, BlockSize: block,
			Tokenizer: []*registryv1.TokenizerArtifact{{Name: art, Sha256: sum}}}
		for _, l := range []string{lora1, lora2} {
			if l != "" {
				c.LoraAdapters = append(c.LoraAdapters, &registryv1.LoraAdapter{Name: l, Path: path})
			}
		}
		err := validateCard(c)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		data, err := encodeCard(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeCard(data); err != nil {
			t.Fatalf("valid card does not decode: %v", err)
		}
	})
}

func FuzzValidatePod(f *testing.F) {
	f.Add("vllm-worker-0", "dynamo", "6f1b3c1e-0d1c-4f6a-9a57-2b0e8f9d1a10")
	f.Add("Worker", "a.b", "a/b")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, name, ns, uid string) {
		err := validatePod(&registryv1.KubernetesPod{Name: name, Namespace: ns, Uid: uid})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("validation error %v is not ErrInvalid", err)
			}
			return
		}
		if err := validLease("lease_id", kubeInstanceID(uid)); err != nil {
			t.Fatalf("the instance id of an accepted pod is no lease id: %v", err)
		}
	})
}

// FuzzKubeSpec feeds arbitrary DynamoWorkerMetadata specs (hand-written or
// from another version) to the join: it must not panic, and it must publish
// only valid entries, with the pod's instance id, that round-trip.
func FuzzKubeSpec(f *testing.F) {
	f.Add([]byte(`{"podName":"w","podUID":"u","endpoints":[{"namespace":"a","component":"b","endpoint":"c","transport":{"tcp":"h:1"}}],"models":[{"namespace":"a","component":"b","endpoint":"c","modelName":"m","blockSize":16,"contextLength":8}]}`))
	f.Add([]byte(`{"podUID":"u","endpoints":[{"namespace":"A","transport":{}}]}`))
	f.Add([]byte(`{"podUID":"u","endpoints":[{"namespace":"a","component":"b","endpoint":"c","transport":{"tcp":"h:1","nats":"x"}}]}`))
	f.Add([]byte(`{"podUID":1,"endpoints":"x"}`))
	f.Add([]byte(`{"podName":"w","podUID":"u","role":"prefill","endpoints":[{"namespace":"a","component":"b","endpoint":"c","transport":{"tcp":"h:1"},"role":"decode","kvTransfer":{"kind":"mock","address":"h:2","dataParallelSize":2}}]}`))
	f.Add([]byte(`{"podName":"w","podUID":"u","endpoints":[{"namespace":"a","component":"b","endpoint":"c","transport":{"tcp":"h:1"},"role":"Agg","kvTransfer":{"kind":"rdma"}}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec any
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetName("w")
		ws, err := specOf(u)
		if err != nil {
			return
		}
		st := join([]*unstructured.Unstructured{u}, readyPods{uids: map[string]bool{ws.PodUID: true}, names: map[string]bool{}})
		id := kubeInstanceID(ws.PodUID)
		for key, in := range st.instances {
			if err := validateInstance(in); err != nil || in.InstanceId != id {
				t.Fatalf("published %s: %v (id %x, want %x)", key, err, in.InstanceId, id)
			}
			if back, err := toEndpointEntry(in).instance(id); err != nil || !proto.Equal(back, in) {
				t.Fatalf("entry round trip: %v != %v (%v)", back, in, err)
			}
		}
		for key, c := range st.models {
			if err := validateCard(c); err != nil || c.InstanceId != id {
				t.Fatalf("published card %s: %v", key, err)
			}
			if back := toModelEntry(c).card(id); !proto.Equal(back, c) {
				t.Fatalf("card round trip: %v != %v", back, c)
			}
		}
	})
}

// FuzzDecodeCard: a model card value is proto JSON read back from etcd.
// decodeCard must refuse what does not parse, never panic, and a card it
// reads encodes and decodes to itself.
func FuzzDecodeCard(f *testing.F) {
	good, err := encodeCard(&registryv1.ModelCard{Namespace: "ns", Component: "c", Endpoint: "e", InstanceId: 7, ModelName: "Qwen/Qwen3-0.6B",
		BlockSize: 16, ContextLength: 4096, Tokenizer: []*registryv1.TokenizerArtifact{{Name: "tokenizer.json", Sha256: strings.Repeat("ab", 32), Size: 11, ObjectKey: "k"}},
		Metadata: map[string]string{"a": "b"}, ToolCallParser: "hermes"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"model_name":"m","block_size":"16","instance_id":"18446744073709551615","unknown":[1,{"x":null}]}`))
	f.Add([]byte(`{"tokenizer":[{"size":-1}]}`))
	f.Add([]byte(`{"block_size":1e40}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeCard(data)
		if err != nil {
			return
		}
		again, err := encodeCard(c)
		if err != nil {
			t.Fatalf("decoded card %v does not encode: %v", c, err)
		}
		back, err := decodeCard(again)
		if err != nil || !proto.Equal(back, c) {
			t.Fatalf("card %v encodes to %s, which decodes to %v, %v", c, again, back, err)
		}
	})
}
