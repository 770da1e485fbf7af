package registry

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Limits on what clients may store. Each is enforced before any I/O.
const (
	DefaultTTL      = 10 * time.Second
	MinTTL          = 1 * time.Second
	MaxTTL          = 300 * time.Second
	MaxMetadata     = 64 << 10 // bytes of keys plus values
	MaxAddress      = 1024
	MaxKeyLen       = 512
	MaxValueLen     = 1 << 20
	MaxModelName    = 256
	MaxArtifacts    = 64
	DefaultLockWait = 10 * time.Second
	MaxLockWait     = 300 * time.Second
)

// Limits on an instance's KV transfer, enforced with the others.
const (
	// MaxEngineID bounds a KV transfer's engine id (vLLM's are UUIDs).
	MaxEngineID = 256
	// MaxDataParallelSize bounds a KV transfer's data-parallel size, and
	// a model card's.
	MaxDataParallelSize = 1024
)

// Limits on a model card's LoRA adapters, enforced with the others.
const (
	// MaxLoraAdapters bounds the adapters one card lists, and its
	// max_loras.
	MaxLoraAdapters = 1024
	// MaxLoraPath bounds an adapter's path.
	MaxLoraPath = 4096
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// maxNameLen keeps keys of sane length; the seed sets no bound, etcd's is 1.5 MiB.
const maxNameLen = 128

func validName(field, v string) error {
	if v == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	}
	if len(v) > maxNameLen {
		return fmt.Errorf("%w: %s is %d bytes, over the limit of %d", ErrInvalid, field, len(v), maxNameLen)
	}
	if !nameRE.MatchString(v) {
		return fmt.Errorf("%w: %s %q does not match ^[a-z0-9][a-z0-9_-]*$", ErrInvalid, field, v)
	}
	return nil
}

// ttlOf turns a request's seconds into a TTL: 0 is the default, and the rest
// must lie in 1..300 s.
func ttlOf(seconds int64) (time.Duration, error) {
	if seconds == 0 {
		return DefaultTTL, nil
	}
	if seconds < int64(MinTTL/time.Second) || seconds > int64(MaxTTL/time.Second) {
		return 0, fmt.Errorf("%w: ttl_seconds %d is outside 1..300", ErrInvalid, seconds)
	}
	return time.Duration(seconds) * time.Second, nil
}

func validMetadata(md map[string]string) error {
	n := 0
	for k, v := range md {
		if k == "" {
			return fmt.Errorf("%w: metadata has an empty key", ErrInvalid)
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: metadata key %q or its value is not valid UTF-8", ErrInvalid, k)
		}
		n += len(k) + len(v)
	}
	if n > MaxMetadata {
		return fmt.Errorf("%w: metadata is %d bytes, over the limit of %d (64 KiB)", ErrInvalid, n, MaxMetadata)
	}
	return nil
}

func validTransport(t *commonv1.Transport) error {
	addrs := transport.AddressesOf(t)
	if len(addrs) == 0 {
		return fmt.Errorf("%w: transport is missing or its address is empty: set at least one of %s", ErrInvalid, transport.PlaneNames())
	}
	for _, a := range addrs {
		if len(a.Addr) > MaxAddress || !utf8.ValidString(a.Addr) {
			return fmt.Errorf("%w: transport %s address is not valid UTF-8 of at most %d bytes", ErrInvalid, a.Kind, MaxAddress)
		}
		if err := a.Validate(); err != nil {
			return fmt.Errorf("%w: instance.transport.%s %q: %v", ErrInvalid, a.Kind, a.Addr, err)
		}
	}
	return nil
}

func validateInstance(in *registryv1.Instance) error {
	if in == nil {
		return fmt.Errorf("%w: instance is missing", ErrInvalid)
	}
	for _, f := range []struct{ name, v string }{{"namespace", in.Namespace}, {"component", in.Component}, {"endpoint", in.Endpoint}} {
		if err := validName(f.name, f.v); err != nil {
			return err
		}
	}
	if err := validTransport(in.Transport); err != nil {
		return err
	}
	if err := validDisaggregation(in.Role, in.KvTransfer); err != nil {
		return err
	}
	return validMetadata(in.Metadata)
}

// validDisaggregation checks an instance's role and KV transfer: known
// enum values, a transfer only on a prefill or decode instance, an engine
// id of at most MaxEngineID bytes of UTF-8, an address that is host:port,
// a data-parallel size of at most MaxDataParallelSize.
func validDisaggregation(role commonv1.Role, t *commonv1.KvTransfer) error {
	if _, ok := commonv1.Role_name[int32(role)]; !ok {
		return fmt.Errorf("%w: role %d is not one of %s", ErrInvalid, int32(role), strings.Join(wire.RoleNames, ", "))
	}
	if t == nil {
		return nil
	}
	if r := wire.EffectiveRole(role); r != commonv1.Role_ROLE_PREFILL && r != commonv1.Role_ROLE_DECODE {
		return fmt.Errorf("%w: kv_transfer is set on a %s instance; only prefill and decode instances hand KV over", ErrInvalid, wire.RoleName(role))
	}
	if _, ok := commonv1.KvTransferKind_name[int32(t.Kind)]; !ok {
		return fmt.Errorf("%w: kv_transfer kind %d is not one of %s", ErrInvalid, int32(t.Kind), strings.Join(wire.TransferKindNames, ", "))
	}
	if len(t.EngineId) > MaxEngineID || !utf8.ValidString(t.EngineId) {
		return fmt.Errorf("%w: kv_transfer engine_id must be valid UTF-8 of at most %d bytes", ErrInvalid, MaxEngineID)
	}
	if len(t.Address) > MaxAddress {
		return fmt.Errorf("%w: kv_transfer address is over %d bytes", ErrInvalid, MaxAddress)
	}
	if t.Address != "" {
		if err := transport.ValidHostPort(t.Address); err != nil {
			return fmt.Errorf("%w: kv_transfer address: %w", ErrInvalid, err)
		}
	}
	if t.DataParallelSize > MaxDataParallelSize {
		return fmt.Errorf("%w: kv_transfer data_parallel_size %d is over %d", ErrInvalid, t.DataParallelSize, MaxDataParallelSize)
	}
	return nil
}

func validateRegister(r *registryv1.RegisterRequest) (time.Duration, error) {
	if err := validateInstance(r.GetInstance()); err != nil {
		return 0, err
	}
	if err := validatePod(r.GetPod()); err != nil {
		return 0, err
	}
	return ttlOf(r.GetTtlSeconds())
}

// validateFilter checks a namespace/component/endpoint filter: names that are
// set must be valid, and a later name needs the earlier ones.
func validateFilter(names ...[2]string) error {
	gap := ""
	for _, n := range names {
		if n[1] == "" {
			if gap == "" {
				gap = n[0]
			}
			continue
		}
		if gap != "" {
			return fmt.Errorf("%w: filter sets %s without %s", ErrInvalid, n[0], gap)
		}
		if err := validName("filter "+n[0], n[1]); err != nil {
			return err
		}
	}
	return nil
}

func validateInstanceFilter(f *registryv1.InstanceFilter) error {
	return validateFilter([2]string{"namespace", f.GetNamespace()}, [2]string{"component", f.GetComponent()}, [2]string{"endpoint", f.GetEndpoint()})
}

func validateModelFilter(f *registryv1.ModelFilter) error {
	if f.GetNamespace() != "" {
		if err := validName("filter namespace", f.GetNamespace()); err != nil {
			return err
		}
	}
	if len(f.GetModelName()) > MaxModelName {
		return fmt.Errorf("%w: filter model_name is over %d bytes", ErrInvalid, MaxModelName)
	}
	return nil
}

func validateCard(c *registryv1.ModelCard) error {
	if c == nil {
		return fmt.Errorf("%w: card is missing", ErrInvalid)
	}
	for _, f := range []struct{ name, v string }{{"card namespace", c.Namespace}, {"card component", c.Component}, {"card endpoint", c.Endpoint}} {
		if err := validName(f.name, f.v); err != nil {
			return err
		}
	}
	if c.ModelName == "" {
		return fmt.Errorf("%w: card model_name is empty", ErrInvalid)
	}
	if len(c.ModelName) > MaxModelName || !utf8.ValidString(c.ModelName) {
		return fmt.Errorf("%w: card model_name must be valid UTF-8 of at most %d bytes", ErrInvalid, MaxModelName)
	}
	if c.BlockSize == 0 {
		return fmt.Errorf("%w: card block_size must be positive", ErrInvalid)
	}
	if len(c.Tokenizer) > MaxArtifacts {
		return fmt.Errorf("%w: card has %d tokenizer artifacts, over the limit of %d", ErrInvalid, len(c.Tokenizer), MaxArtifacts)
	}
	for i, a := range c.Tokenizer {
		if a.GetName() == "" || !utf8.ValidString(a.GetName()) || !utf8.ValidString(a.GetObjectKey()) {
			return fmt.Errorf("%w: tokenizer artifact %d needs a valid UTF-8 name", ErrInvalid, i)
		}
		if !sha256Hex(a.GetSha256()) {
			return fmt.Errorf("%w: tokenizer artifact %q sha256 must be 64 lower-case hex digits", ErrInvalid, a.GetName())
		}
	}
	if err := validLoras(c); err != nil {
		return err
	}
	if c.DataParallelSize > MaxDataParallelSize {
		return fmt.Errorf("%w: card data_parallel_size %d is over the limit of %d", ErrInvalid, c.DataParallelSize, MaxDataParallelSize)
	}
	return validMetadata(c.Metadata)
}

// validLoras checks a card's LoRA adapters: at most MaxLoraAdapters, each
// named as a model is (1 to MaxModelName bytes of UTF-8) without control
// characters (a router refuses a request naming one), unique, other than
// the card's model, with a UTF-8 path of at most MaxLoraPath bytes.
func validLoras(c *registryv1.ModelCard) error {
	if n := len(c.LoraAdapters); n > MaxLoraAdapters {
		return fmt.Errorf("%w: card lists %d LoRA adapters, over the limit of %d", ErrInvalid, n, MaxLoraAdapters)
	}
	if c.MaxLoras > MaxLoraAdapters {
		return fmt.Errorf("%w: card max_loras %d is over the limit of %d", ErrInvalid, c.MaxLoras, MaxLoraAdapters)
	}
	seen := make(map[string]bool, len(c.LoraAdapters))
	for i, l := range c.LoraAdapters {
		name := l.GetName()
		if name == "" || len(name) > MaxModelName || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
			return fmt.Errorf("%w: LoRA adapter %d needs a name of 1..%d bytes of UTF-8 without control characters", ErrInvalid, i, MaxModelName)
		}
		if name == c.ModelName {
			return fmt.Errorf("%w: LoRA adapter %q has the card's model name", ErrInvalid, name)
		}
		if seen[name] {
			return fmt.Errorf("%w: LoRA adapter %q is listed twice", ErrInvalid, name)
		}
		seen[name] = true
		if len(l.GetPath()) > MaxLoraPath || !utf8.ValidString(l.GetPath()) {
			return fmt.Errorf("%w: LoRA adapter %q path must be valid UTF-8 of at most %d bytes", ErrInvalid, name, MaxLoraPath)
		}
	}
	return nil
}

func sha256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func validLease(field string, id uint64) error {
	if id == 0 {
		return fmt.Errorf("%w: %s is required", ErrInvalid, field)
	}
	if id > 1<<63-1 {
		return fmt.Errorf("%w: %s %d is not an etcd lease id", ErrInvalid, field, id)
	}
	return nil
}

func validKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalid)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, over the limit of %d", ErrInvalid, len(key), MaxKeyLen)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalid)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: key %q has a control character", ErrInvalid, key)
		}
	}
	return nil
}

func validPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validKey(prefix)
}

func validValue(v []byte) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("%w: value is %d bytes, over the limit of %d (1 MiB)", ErrInvalid, len(v), MaxValueLen)
	}
	return nil
}

// lockWait turns a request's milliseconds into a wait: 0 is 10 s.
func lockWait(ms int64) (time.Duration, error) {
	if ms == 0 {
		return DefaultLockWait, nil
	}
	if ms < 1 || ms > MaxLockWait.Milliseconds() {
		return 0, fmt.Errorf("%w: timeout_ms %d is outside 1..300000", ErrInvalid, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

var (
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dnsLabelRE     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	podUIDRE       = regexp.MustCompile(`^[0-9A-Za-z-]{1,128}$`)
)

// validatePod checks a worker's pod reference when one is given: a pod name
// (DNS subdomain), a namespace (DNS label) and a UID, all three or none.
func validatePod(p *registryv1.KubernetesPod) error {
	if p == nil {
		return nil
	}
	switch {
	case p.Name == "" || p.Namespace == "" || p.Uid == "":
		return fmt.Errorf("%w: pod needs name, namespace and uid (POD_NAME, POD_NAMESPACE, POD_UID), got %q, %q, %q", ErrInvalid, p.Name, p.Namespace, p.Uid)
	case len(p.Name) > 253 || !dnsSubdomainRE.MatchString(p.Name):
		return fmt.Errorf("%w: pod name %q is not a Kubernetes object name", ErrInvalid, p.Name)
	case len(p.Namespace) > 63 || !dnsLabelRE.MatchString(p.Namespace):
		return fmt.Errorf("%w: pod namespace %q is not a Kubernetes namespace name", ErrInvalid, p.Namespace)
	case !podUIDRE.MatchString(p.Uid):
		return fmt.Errorf("%w: pod uid %q is not a Kubernetes UID", ErrInvalid, p.Uid)
	}
	return nil
}
