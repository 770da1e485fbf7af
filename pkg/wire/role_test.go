package wire

import (
	"strings"
	"testing"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
)

func TestRoleNames(t *testing.T) {
	tests := []struct {
		in      string
		want    commonv1.Role
		wantErr bool
	}{
		{"agg", commonv1.Role_ROLE_AGG, false},
		{"prefill", commonv1.Role_ROLE_PREFILL, false},
		{"DECODE", commonv1.Role_ROLE_DECODE, false},
		{"", 0, true},
		{"both", 0, true},
		{"role_prefill", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRole(tt.in)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "agg, prefill, decode") {
					t.Fatalf("ParseRole(%q) = %v, %v; want an error naming the valid values", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseRole(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if back := RoleName(got); back != strings.ToLower(tt.in) {
				t.Fatalf("RoleName(%v) = %q, want %q", got, back, strings.ToLower(tt.in))
			}
		})
	}
	if RoleName(commonv1.Role_ROLE_UNSPECIFIED) != RoleAgg || EffectiveRole(commonv1.Role_ROLE_UNSPECIFIED) != commonv1.Role_ROLE_AGG {
		t.Fatal("ROLE_UNSPECIFIED must read as agg")
	}
	if RoleName(commonv1.Role(9)) != "role(9)" {
		t.Fatalf("RoleName(9) = %q", RoleName(commonv1.Role(9)))
	}
}

func TestTransferKindNames(t *testing.T) {
	for _, name := range TransferKindNames {
		k, err := ParseTransferKind(strings.ToUpper(name))
		if err != nil || TransferKindName(k) != name {
			t.Fatalf("%q: parsed %v, %v; named %q", name, k, err, TransferKindName(k))
		}
	}
	if _, err := ParseTransferKind("rdma"); err == nil || !strings.Contains(err.Error(), "nixl, mooncake, bootstrap, mock") {
		t.Fatalf("ParseTransferKind(rdma) = %v; want an error naming the valid values", err)
	}
	if TransferKindName(commonv1.KvTransferKind_KV_TRANSFER_KIND_UNSPECIFIED) != "" || TransferKindName(commonv1.KvTransferKind(7)) != "kind(7)" {
		t.Fatal("unnamed kinds")
	}
}

func FuzzParseRole(f *testing.F) {
	for _, s := range []string{"agg", "Prefill", "decode", "", "x", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if r, err := ParseRole(s); err == nil && RoleName(r) != strings.ToLower(s) {
			t.Fatalf("ParseRole(%q) = %v named %q", s, r, RoleName(r))
		}
		if k, err := ParseTransferKind(s); err == nil && TransferKindName(k) != strings.ToLower(s) {
			t.Fatalf("ParseTransferKind(%q) = %v named %q", s, k, TransferKindName(k))
		}
	})
}
