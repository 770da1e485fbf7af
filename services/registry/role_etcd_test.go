package registry_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/testing/protocmp"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// dynamoInstanceValue is the instance value as a reader of Dynamo's layout
// (Dynamo, or a registry from before roles) parses it: no role, no
// kv_transfer.
type dynamoInstanceValue struct {
	Namespace  string            `json:"namespace"`
	Component  string            `json:"component"`
	Endpoint   string            `json:"endpoint"`
	InstanceID uint64            `json:"instance_id"`
	Transport  map[string]string `json:"transport"`
}

// TestRoleIsStoredBesideTheSeedFields registers instances of each role over
// gRPC on a real etcd and reads the etcd value: an instance without a role
// is Dynamo's value as it was; a role and its KV transfer are added after
// Dynamo's fields, a reader of Dynamo's layout still parses the value, and the registry
// lists the role back.
func TestRoleIsStoredBesideTheSeedFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	tests := []struct {
		name string
		role commonv1.Role
		kvt  *commonv1.KvTransfer
		tail string // after Dynamo's fields; %d is the instance id
	}{
		{"none", commonv1.Role_ROLE_UNSPECIFIED, nil, ``},
		{"agg", commonv1.Role_ROLE_AGG, nil, `,"role":"agg"`},
		{"prefill", commonv1.Role_ROLE_PREFILL, &commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_NIXL, EngineId: "engine-7", Address: "10.0.0.7:5600", DataParallelSize: 2},
			`,"role":"prefill","kv_transfer":{"kind":"nixl","engine_id":"engine-7","address":"10.0.0.7:5600","data_parallel_size":2}`},
		{"decode", commonv1.Role_ROLE_DECODE, &commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, Address: "10.0.0.8:7000"},
			`,"role":"decode","kv_transfer":{"kind":"mock","address":"10.0.0.8:7000"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			comp := "role-" + tt.name
			in := &registryv1.Instance{Namespace: "disagg", Component: comp, Endpoint: "generate", Transport: &commonv1.Transport{Tcp: "10.0.0.7:9345"},
				Role: tt.role, KvTransfer: tt.kvt}
			resp, err := e.rpc.Register(ctx, &registryv1.RegisterRequest{Instance: in, TtlSeconds: 30})
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.kv.Get(ctx, fmt.Sprintf("/services/disagg/%s/generate/%x", comp, resp.InstanceId))
			if err != nil || len(got.Kvs) != 1 {
				t.Fatalf("get: %v", err)
			}
			want := fmt.Sprintf(`{"namespace":"disagg","component":"%s","endpoint":"generate","instance_id":%d,"transport":{"tcp":"10.0.0.7:9345"}%s}`, comp, resp.InstanceId, tt.tail)
			if string(got.Kvs[0].Value) != want {
				t.Fatalf("value\n got %s\nwant %s", got.Kvs[0].Value, want)
			}
			var seed dynamoInstanceValue
			if err := json.Unmarshal(got.Kvs[0].Value, &seed); err != nil || seed.InstanceID != resp.InstanceId || seed.Transport["tcp"] != "10.0.0.7:9345" {
				t.Fatalf("a seed reader parses %s as %+v, %v", got.Kvs[0].Value, seed, err)
			}
			list, err := e.rpc.ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "disagg", Component: comp}})
			if err != nil || len(list.Instances) != 1 {
				t.Fatalf("list: %v %v", list, err)
			}
			in.InstanceId = resp.InstanceId
			if d := cmp.Diff(in, list.Instances[0], protocmp.Transform()); d != "" {
				t.Fatalf("listed (-want +got):\n%s", d)
			}
		})
	}
}

// TestSeedValueReadsAsAgg: a value written the old way, without a role,
// lists with ROLE_UNSPECIFIED, which every reader takes as agg.
func TestSeedValueReadsAsAgg(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	lease, err := e.kv.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	val := fmt.Sprintf(`{"namespace":"old","component":"backend","endpoint":"generate","instance_id":%d,"transport":{"tcp":"127.0.0.1:1"}}`, lease.ID)
	if _, err := e.kv.Put(ctx, fmt.Sprintf("/services/old/backend/generate/%x", int64(lease.ID)), val, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	list, err := e.rpc.ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "old"}})
	if err != nil || len(list.Instances) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	in := list.Instances[0]
	if in.Role != commonv1.Role_ROLE_UNSPECIFIED || in.KvTransfer != nil || wire.RoleName(in.Role) != wire.RoleAgg {
		t.Fatalf("old value listed with role %v (%s), kv_transfer %v; want unspecified, read as agg", in.Role, wire.RoleName(in.Role), in.KvTransfer)
	}
}
