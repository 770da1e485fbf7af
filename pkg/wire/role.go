package wire

import (
	"fmt"
	"strings"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
)

// Role names, as the registry's etcd JSON ("role"), the workers'
// --disaggregation-mode flag, the Kubernetes pod label and `switchyard
// status` spell commonv1.Role.
const (
	RoleAgg     = "agg"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// RoleNames lists the valid role names, for errors and flag usage.
var RoleNames = []string{RoleAgg, RolePrefill, RoleDecode}

// EffectiveRole is r with ROLE_UNSPECIFIED read as ROLE_AGG: an instance
// registered without a role (by a worker that predates roles) is
// aggregated.
func EffectiveRole(r commonv1.Role) commonv1.Role {
	if r == commonv1.Role_ROLE_UNSPECIFIED {
		return commonv1.Role_ROLE_AGG
	}
	return r
}

// RoleName is the name of r ("agg" for ROLE_UNSPECIFIED); a value no
// name covers is spelled as its number.
func RoleName(r commonv1.Role) string {
	switch EffectiveRole(r) {
	case commonv1.Role_ROLE_AGG:
		return RoleAgg
	case commonv1.Role_ROLE_PREFILL:
		return RolePrefill
	case commonv1.Role_ROLE_DECODE:
		return RoleDecode
	}
	return fmt.Sprintf("role(%d)", int32(r))
}

// ParseRole reads a role name, case-insensitively. Anything else is an
// error that names the valid values.
func ParseRole(s string) (commonv1.Role, error) {
	switch strings.ToLower(s) {
	case RoleAgg:
		return commonv1.Role_ROLE_AGG, nil
	case RolePrefill:
		return commonv1.Role_ROLE_PREFILL, nil
	case RoleDecode:
		return commonv1.Role_ROLE_DECODE, nil
	}
	return commonv1.Role_ROLE_UNSPECIFIED, fmt.Errorf("invalid role %q: valid values are %s", s, strings.Join(RoleNames, ", "))
}

// KV transfer kind names, as the registry's etcd JSON and the workers'
// flags spell commonv1.KvTransferKind.
const (
	TransferNIXL      = "nixl"
	TransferMooncake  = "mooncake"
	TransferBootstrap = "bootstrap"
	TransferMock      = "mock"
)

// TransferKindNames lists the valid transfer kind names.
var TransferKindNames = []string{TransferNIXL, TransferMooncake, TransferBootstrap, TransferMock}

var transferKinds = map[string]commonv1.KvTransferKind{
	TransferNIXL:      commonv1.KvTransferKind_KV_TRANSFER_KIND_NIXL,
	TransferMooncake:  commonv1.KvTransferKind_KV_TRANSFER_KIND_MOONCAKE,
	TransferBootstrap: commonv1.KvTransferKind_KV_TRANSFER_KIND_BOOTSTRAP,
	TransferMock:      commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK,
}

// TransferKindName is the name of k: "" for KV_TRANSFER_KIND_UNSPECIFIED,
// and a value no name covers spelled as its number.
func TransferKindName(k commonv1.KvTransferKind) string {
	if k == commonv1.KvTransferKind_KV_TRANSFER_KIND_UNSPECIFIED {
		return ""
	}
	for name, v := range transferKinds {
		if v == k {
			return name
		}
	}
	return fmt.Sprintf("kind(%d)", int32(k))
}

// ParseTransferKind reads a transfer kind name, case-insensitively.
// Anything else is an error that names the valid values.
func ParseTransferKind(s string) (commonv1.KvTransferKind, error) {
	if k, ok := transferKinds[strings.ToLower(s)]; ok {
		return k, nil
	}
	return commonv1.KvTransferKind_KV_TRANSFER_KIND_UNSPECIFIED, fmt.Errorf("invalid KV transfer kind %q: valid values are %s", s, strings.Join(TransferKindNames, ", "))
}
