package worker_test

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// TestWorkerRegistersItsRole: a decode worker registers its role and its KV
// transfer, the empty address filled with its WorkerService address; an
// aggregated one registers no transfer; WorkerService's handoff calls are
// Unimplemented without Config.KVHandoffs.
func TestWorkerRegistersItsRole(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := registryclient.Dial([]string{e.regAddr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	tests := []struct {
		name     string
		role     commonv1.Role
		transfer *commonv1.KvTransfer
	}{
		{"agg", commonv1.Role_ROLE_AGG, nil},
		{"decode", commonv1.Role_ROLE_DECODE, &commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, DataParallelSize: 1}},
		{"prefill", commonv1.Role_ROLE_PREFILL, &commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_BOOTSTRAP, EngineId: "e0", Address: "10.0.0.1:8998"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := e.config(t)
			cfg.Component = "role-" + tt.name
			cfg.Role, cfg.KVTransfer = tt.role, tt.transfer
			w, err := worker.Start(ctx, cfg, echo(0, nil))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Shutdown(context.Background())
			list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "test", Component: cfg.Component}})
			if err != nil || len(list.Instances) != 1 {
				t.Fatalf("ListInstances = %v, %v", list, err)
			}
			in := list.Instances[0]
			want := tt.transfer
			if want != nil && want.Address == "" {
				want = &commonv1.KvTransfer{Kind: want.Kind, DataParallelSize: want.DataParallelSize, Address: w.APIAddr()}
			}
			if in.Role != tt.role {
				t.Errorf("registered role %v, want %v", in.Role, tt.role)
			}
			if d := cmp.Diff(want, in.KvTransfer, protocmp.Transform()); d != "" {
				t.Errorf("registered kv_transfer (-want +got):\n%s", d)
			}
			cc, err := grpc.NewClient(w.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			_, err = workerv1.NewWorkerServiceClient(cc).PullKvHandoff(ctx, &workerv1.PullKvHandoffRequest{HandoffId: "h"})
			if status.Code(err) != codes.Unimplemented {
				t.Errorf("PullKvHandoff without KVHandoffs = %v, want Unimplemented", err)
			}
		})
	}
}

// TestWorkerRefusesBadRoles: a role and transfer that do not go together
// fail Start before anything starts, with an error that says why.
func TestWorkerRefusesBadRoles(t *testing.T) {
	tests := []struct {
		name     string
		role     commonv1.Role
		transfer *commonv1.KvTransfer
		msg      string
	}{
		{"prefill without a transfer", commonv1.Role_ROLE_PREFILL, nil, "a prefill worker needs a KV transfer kind (nixl, mooncake, bootstrap, mock)"},
		{"decode without a kind", commonv1.Role_ROLE_DECODE, &commonv1.KvTransfer{Address: "h:1"}, "a decode worker needs a KV transfer kind"},
		{"agg with a transfer", commonv1.Role_ROLE_AGG, &commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK}, "only prefill and decode workers hand KV over"},
		{"unknown role", commonv1.Role(7), nil, "valid values are agg, prefill, decode"},
		{"unknown kind", commonv1.Role_ROLE_PREFILL, &commonv1.KvTransfer{Kind: commonv1.KvTransferKind(9)}, "valid values are nixl, mooncake, bootstrap, mock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := worker.Config{Namespace: "test", Component: "c", Model: worker.Model{Name: "m", BlockSize: 4}, Role: tt.role, KVTransfer: tt.transfer}
			_, err := worker.Start(context.Background(), cfg, echo(0, nil))
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Start = %v, want an error containing %q", err, tt.msg)
			}
		})
	}
}

// TestDisaggregationModeFlag: --disaggregation-mode takes agg, prefill or
// decode and names them when given anything else; the adapter's transfer
// flags build the transfer of a prefill or decode worker only.
func TestDisaggregationModeFlag(t *testing.T) {
	tests := []struct {
		args     []string
		role     commonv1.Role
		transfer *commonv1.KvTransfer
		msg      string
	}{
		{nil, commonv1.Role_ROLE_AGG, nil, ""},
		{[]string{"--disaggregation-mode", "prefill", "--kv-transfer-kind", "nixl", "--kv-transfer-engine-id", "e1"}, commonv1.Role_ROLE_PREFILL,
			&commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_NIXL, EngineId: "e1", DataParallelSize: 1}, ""},
		{[]string{"--disaggregation-mode", "decode", "--kv-transfer-kind", "bootstrap", "--kv-transfer-addr", "10.0.0.2:8998", "--data-parallel-size", "4"}, commonv1.Role_ROLE_DECODE,
			&commonv1.KvTransfer{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_BOOTSTRAP, Address: "10.0.0.2:8998", DataParallelSize: 4}, ""},
		{[]string{"--disaggregation-mode", "agg", "--kv-transfer-kind", "mock"}, commonv1.Role_ROLE_AGG, nil, ""},
		{[]string{"--disaggregation-mode", "both"}, 0, nil, `--disaggregation-mode: invalid role "both": valid values are agg, prefill, decode`},
		{[]string{"--disaggregation-mode", "prefill", "--kv-transfer-kind", "rdma"}, 0, nil, `--kv-transfer-kind: invalid KV transfer kind "rdma": valid values are nixl, mooncake, bootstrap, mock`},
		{[]string{"--data-parallel-size", "1025"}, 0, nil, "--data-parallel-size 1025 must be at most 1024 and not negative"}, {[]string{"--data-parallel-size", "1024"}, commonv1.Role_ROLE_AGG, nil, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var f worker.DisaggFlags
			fs := flag.NewFlagSet("w", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.RegisterFlags(fs)
			f.RegisterTransferFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := f.Validate()
			if tt.msg != "" {
				if err == nil || err.Error() != tt.msg {
					t.Fatalf("Validate = %v, want %q", err, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Role() != tt.role {
				t.Errorf("role %v, want %v", f.Role(), tt.role)
			}
			if d := cmp.Diff(tt.transfer, f.Transfer(), protocmp.Transform()); d != "" {
				t.Errorf("transfer (-want +got):\n%s", d)
			}
		})
	}
}
