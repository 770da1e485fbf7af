package registry

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// The etcd key layout. Instances follow the seed exactly:
// /services/{namespace}/{component}/{endpoint}/{instance_id as lower-case hex}.
const (
	servicesPrefix = "/services/"
	modelsPrefix   = "/models/"
	bucketsPrefix  = "/buckets/"
	kvPrefix       = "/kv/"
	locksPrefix    = "/locks/"
	// leaseTokensPrefix holds, per lease, the SHA-256 of its secret token,
	// tied to the lease: the registry's own key, beside the seed layout.
	leaseTokensPrefix = "/registry/lease-tokens/"
)

// leaseTokenKey is where the digest of a lease's token lives.
func leaseTokenKey(lease uint64) string { return leaseTokensPrefix + strconv.FormatUint(lease, 16) }

// instanceKey is the etcd key of one instance.
func instanceKey(namespace, component, endpoint string, id uint64) string {
	return servicesPrefix + namespace + "/" + component + "/" + endpoint + "/" + strconv.FormatUint(id, 16)
}

// modelKey is the etcd key of one instance's model card.
func modelKey(namespace, component, endpoint string, id uint64) string {
	return modelsPrefix + namespace + "/" + component + "/" + endpoint + "/" + strconv.FormatUint(id, 16)
}

// filterPrefix turns names (possibly empty from some point on) into a key
// prefix ending in "/", so that namespace "a" never matches "ab".
func filterPrefix(root string, names ...string) string {
	var b strings.Builder
	b.WriteString(root)
	for _, n := range names {
		if n == "" {
			break
		}
		b.WriteString(n)
		b.WriteByte('/')
	}
	return b.String()
}

// parseEndpointKey splits {root}{namespace}/{component}/{endpoint}/{hex id}.
func parseEndpointKey(root, key string) (ns, comp, ep string, id uint64, err error) {
	rest, ok := strings.CutPrefix(key, root)
	if !ok {
		return "", "", "", 0, fmt.Errorf("key %q is not under %s", key, root)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 {
		return "", "", "", 0, fmt.Errorf("key %q does not have 4 segments under %s", key, root)
	}
	id, err = strconv.ParseUint(parts[3], 16, 64)
	if err != nil {
		return "", "", "", 0, fmt.Errorf("key %q: instance id: %w", key, err)
	}
	return parts[0], parts[1], parts[2], id, nil
}

// instanceValue is the Dynamo-compatible JSON value of an instance key. Field
// order is Dynamo's; metadata, role and kv_transfer are Switchyard's additions
// and only present when set, so that readers of Dynamo's layout still parse
// the value and a value without a role reads as agg.
type instanceValue struct {
	Namespace  string            `json:"namespace"`
	Component  string            `json:"component"`
	Endpoint   string            `json:"endpoint"`
	InstanceID uint64            `json:"instance_id"`
	Transport  map[string]string `json:"transport"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	// Role is "agg", "prefill" or "decode" (pkg/wire RoleName).
	Role       string           `json:"role,omitempty"`
	KvTransfer *kvTransferValue `json:"kv_transfer,omitempty"`
}

// kvTransferValue is the JSON form of a KvTransfer, in the etcd value and
// in the Kubernetes backend's endpoint entries alike.
type kvTransferValue struct {
	// Kind is "nixl", "mooncake", "bootstrap" or "mock" (pkg/wire
	// TransferKindName).
	Kind             string `json:"kind,omitempty"`
	EngineID         string `json:"engine_id,omitempty"`
	Address          string `json:"address,omitempty"`
	DataParallelSize uint32 `json:"data_parallel_size,omitempty"`
}

// roleValue is the JSON form of a role: empty for ROLE_UNSPECIFIED (an
// instance that set none, stored as Dynamo's layout has it).
func roleValue(r commonv1.Role) string {
	if r == commonv1.Role_ROLE_UNSPECIFIED {
		return ""
	}
	return wire.RoleName(r)
}

// parseRoleValue reads roleValue's form; empty is ROLE_UNSPECIFIED.
func parseRoleValue(s string) (commonv1.Role, error) {
	if s == "" {
		return commonv1.Role_ROLE_UNSPECIFIED, nil
	}
	if s != strings.ToLower(s) {
		return 0, fmt.Errorf("invalid role %q: valid values are %s", s, strings.Join(wire.RoleNames, ", "))
	}
	return wire.ParseRole(s)
}

func toKvTransferValue(t *commonv1.KvTransfer) *kvTransferValue {
	if t == nil {
		return nil
	}
	return &kvTransferValue{Kind: wire.TransferKindName(t.Kind), EngineID: t.EngineId, Address: t.Address, DataParallelSize: t.DataParallelSize}
}

func (v *kvTransferValue) proto() (*commonv1.KvTransfer, error) {
	if v == nil {
		return nil, nil
	}
	t := &commonv1.KvTransfer{EngineId: v.EngineID, Address: v.Address, DataParallelSize: v.DataParallelSize}
	if v.Kind != "" {
		if v.Kind != strings.ToLower(v.Kind) {
			return nil, fmt.Errorf("invalid KV transfer kind %q: valid values are %s", v.Kind, strings.Join(wire.TransferKindNames, ", "))
		}
		k, err := wire.ParseTransferKind(v.Kind)
		if err != nil {
			return nil, err
		}
		t.Kind = k
	}
	return t, nil
}

func encodeInstance(in *registryv1.Instance) ([]byte, error) {
	v := instanceValue{
		Namespace:  in.GetNamespace(),
		Component:  in.GetComponent(),
		Endpoint:   in.GetEndpoint(),
		InstanceID: in.GetInstanceId(),
		Metadata:   in.GetMetadata(),
		Role:       roleValue(in.GetRole()),
		KvTransfer: toKvTransferValue(in.GetKvTransfer()),
	}
	v.Transport = map[string]string{}
	for _, a := range transport.AddressesOf(in.GetTransport()) {
		v.Transport[string(a.Kind)] = a.Addr
	}
	return json.Marshal(v)
}

// decodeInstance parses an instance value. Values written by other tools
// (Dynamo itself) decode too, as long as they follow the seed's layout.
func decodeInstance(data []byte) (*registryv1.Instance, error) {
	var v instanceValue
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("instance value: %w", err)
	}
	if len(v.Transport) == 0 {
		return nil, fmt.Errorf("instance value: transport must have at least one of %s", transport.PlaneNames())
	}
	addrs := make([]transport.Address, 0, len(v.Transport))
	for kind, addr := range v.Transport {
		if !slices.Contains(transport.Planes(), transport.Plane(kind)) {
			return nil, fmt.Errorf("instance value: unknown transport %q", kind)
		}
		addrs = append(addrs, transport.Address{Kind: transport.Plane(kind), Addr: addr})
	}
	t := transport.TransportOf(addrs...)
	if len(transport.AddressesOf(t)) == 0 {
		return nil, fmt.Errorf("instance value: transport has no address")
	}
	role, err := parseRoleValue(v.Role)
	if err != nil {
		return nil, fmt.Errorf("instance value: %w", err)
	}
	kvt, err := v.KvTransfer.proto()
	if err != nil {
		return nil, fmt.Errorf("instance value: kv_transfer: %w", err)
	}
	return &registryv1.Instance{
		Namespace:  v.Namespace,
		Component:  v.Component,
		Endpoint:   v.Endpoint,
		InstanceId: v.InstanceID,
		Transport:  t,
		Metadata:   v.Metadata,
		Role:       role,
		KvTransfer: kvt,
	}, nil
}

var (
	cardMarshal   = protojson.MarshalOptions{UseProtoNames: true}
	cardUnmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}
)

func encodeCard(c *registryv1.ModelCard) ([]byte, error) { return cardMarshal.Marshal(c) }

func decodeCard(data []byte) (*registryv1.ModelCard, error) {
	c := &registryv1.ModelCard{}
	if err := cardUnmarshal.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("model card value: %w", err)
	}
	return c, nil
}
