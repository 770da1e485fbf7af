package registry

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

func TestDisaggregationValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		role commonv1.Role
		kvt  *commonv1.KvTransfer
		msg  string // "" is valid
	}{
		{"unset", commonv1.Role_ROLE_UNSPECIFIED, nil, ""},
		{"agg", commonv1.Role_ROLE_AGG, nil, ""},
		{"prefill without transfer", commonv1.Role_ROLE_PREFILL, nil, ""},
		{"decode with bootstrap", commonv1.Role_ROLE_DECODE, &commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_BOOTSTRAP, Address: "[::1]:8998"}, ""},
		{"unknown role", commonv1.Role(4), nil, "role 4 is not one of agg, prefill, decode"},
		{"transfer on agg", commonv1.Role_ROLE_AGG, &commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK}, "kv_transfer is set on a agg instance"},
		{"transfer on unset", commonv1.Role_ROLE_UNSPECIFIED, &commonv1.KvTransfer{}, "kv_transfer is set on a agg instance"},
		{"unknown kind", commonv1.Role_ROLE_PREFILL, &commonv1.KvTransfer{Kind: commonv1.KvTransferKind(5)}, "kind 5 is not one of nixl, mooncake, bootstrap, mock"},
		{"engine id not UTF-8", commonv1.Role_ROLE_PREFILL, &commonv1.KvTransfer{EngineId: "\xff"}, "engine_id must be valid UTF-8"},
		{"address not host:port", commonv1.Role_ROLE_PREFILL, &commonv1.KvTransfer{Address: "10.0.0.1"}, "kv_transfer address"},
		{"address past MaxAddress", commonv1.Role_ROLE_PREFILL, &commonv1.KvTransfer{Address: strings.Repeat("a", MaxAddress-1) + ":1"}, "address is over 1024 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &registryv1.Instance{Namespace: "a", Component: "b", Endpoint: "c", Transport: &commonv1.Transport{Tcp: "h:1"}, Role: tt.role, KvTransfer: tt.kvt}
			err := validateInstance(in)
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("valid instance refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want ErrInvalid containing %q", err, tt.msg)
			}
		})
	}
}

// TestKubeRoleFromPodLabel: the pod label switchyard.dev/role, kept in the
// resource's spec.role, is the role of every instance of the pod; without
// it each instance has the role it registered; a label value that is not a
// role makes nothing of the pod visible.
func TestKubeRoleFromPodLabel(t *testing.T) {
	t.Parallel()
	const uid = "uid-role"
	id := kubeInstanceID(uid)
	ready := readyPods{uids: map[string]bool{uid: true}, names: map[string]bool{}}
	entry := func(role string, kvt *kvTransferEntry) endpointEntry {
		e := tcpEntry("generate", "10.0.0.1:9000")
		e.Role, e.KvTransfer = role, kvt
		return e
	}
	mock := &kvTransferEntry{Kind: "mock", Address: "10.0.0.1:7000", DataParallelSize: 1}
	tests := []struct {
		name     string
		label    string // spec.role
		entry    endpointEntry
		want     commonv1.Role
		wantKind commonv1.KvTransferKind
		visible  bool
	}{
		{"no label, no role", "", entry("", nil), commonv1.Role_ROLE_UNSPECIFIED, 0, true},
		{"no label, registered decode", "", entry("decode", mock), commonv1.Role_ROLE_DECODE, commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, true},
		{"label prefill, no role registered", "prefill", entry("", mock), commonv1.Role_ROLE_PREFILL, commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, true},
		{"label agg", "agg", entry("", nil), commonv1.Role_ROLE_AGG, 0, true},
		{"label not a role", "both", entry("", nil), 0, 0, false},
		{"entry role not a role", "", entry("Prefill", nil), 0, 0, false},
		{"entry transfer kind unknown", "", entry("decode", &kvTransferEntry{Kind: "rdma"}), 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := workerResource("w", uid, tt.entry)
			if tt.label != "" {
				if err := unstructured.SetNestedField(u.Object, tt.label, "spec", "role"); err != nil {
					t.Fatal(err)
				}
			}
			st := join([]*unstructured.Unstructured{u}, ready)
			in := st.instances[instanceKey("vllm-agg", "backend", "generate", id)]
			if !tt.visible {
				if in != nil {
					t.Fatalf("published %v", in)
				}
				return
			}
			if in == nil {
				t.Fatal("instance not published")
			}
			if in.Role != tt.want || in.GetKvTransfer().GetKind() != tt.wantKind {
				t.Fatalf("role %v kind %v, want %v %v", in.Role, in.GetKvTransfer().GetKind(), tt.want, tt.wantKind)
			}
		})
	}

	labels := []struct {
		labels map[string]string
		want   commonv1.Role
		err    bool
	}{
		{nil, commonv1.Role_ROLE_UNSPECIFIED, false},
		{map[string]string{LabelRole: "prefill"}, commonv1.Role_ROLE_PREFILL, false},
		{map[string]string{LabelRole: "decode"}, commonv1.Role_ROLE_DECODE, false},
		{map[string]string{LabelRole: ""}, 0, true},
		{map[string]string{LabelRole: "PREFILL"}, 0, true},
	}
	for _, l := range labels {
		got, err := podRole(l.labels)
		if (err != nil) != l.err || got != l.want {
			t.Errorf("podRole(%v) = %v, %v; want %v (error %v)", l.labels, got, err, l.want, l.err)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "valid values are agg, prefill, decode")) {
			t.Errorf("podRole(%v) error %v does not name the valid values", l.labels, err)
		}
	}
}

// TestKubeRoleLabelRefusesOtherRoles: over gRPC on the fakes, a pod whose
// role label is not a role cannot take a lease, and an instance that
// registers a role other than its pod's label is refused; the label's own
// role is listed.
func TestKubeRoleLabelRefusesOtherRoles(t *testing.T) {
	t.Parallel()
	const uid, badUID = "uid-prefill", "uid-bad"
	prefillPod := testPod("prefill-0", uid)
	prefillPod.Labels = map[string]string{LabelRole: "prefill"}
	badPod := testPod("bad-0", badUID)
	badPod.Labels = map[string]string{LabelRole: "both"}
	f := newFakeKube(t, prefillPod, badPod)
	ctx := kubeCtx(t)

	_, err := f.rpc.GrantLease(ctx, &registryv1.GrantLeaseRequest{Pod: &registryv1.KubernetesPod{Name: "bad-0", Namespace: kubeTestNS, Uid: badUID}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `switchyard.dev/role="both"`) {
		t.Fatalf("GrantLease of a pod labelled both = %v, want InvalidArgument naming the label", err)
	}

	res := workerResource("prefill-0", uid, tcpEntry("generate", "10.0.0.1:9000"))
	if err := unstructured.SetNestedField(res.Object, "prefill", "spec", "role"); err != nil {
		t.Fatal(err)
	}
	f.createResource(t, res)
	applySlice(t, f.kube, endpointSlice("workers", true, nil, map[string]string{"prefill-0": uid}))
	w := watchInstancesOf(t, f.rpc, &registryv1.WatchInstancesRequest{})
	key := instanceKey("vllm-agg", "backend", "generate", kubeInstanceID(uid))
	w.until(t, key)
	if got := w.items[key].Role; got != commonv1.Role_ROLE_PREFILL {
		t.Fatalf("listed role %v, want prefill from the label", got)
	}

	decode := &registryv1.Instance{Namespace: "vllm-agg", Component: "backend", Endpoint: "other", Transport: &commonv1.Transport{Tcp: "10.0.0.1:9001"},
		Role: commonv1.Role_ROLE_DECODE}
	_, err = f.backend.Register(ctx, decode, 0, kubeInstanceID(uid), nil, "")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "registers role decode but its pod's label switchyard.dev/role is prefill") {
		t.Fatalf("Register of a decode instance in a prefill pod = %v, want ErrInvalid naming both", err)
	}
}
