package transport

import (
	"encoding/json"
	"fmt"
	"strings"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
)

// Plane names a request plane. Its values are also the keys of an
// [Address]'s JSON form.
type Plane string

// The request planes. Their string values are what DYN_REQUEST_PLANE accepts
// (case-insensitively) and what the registry stores as the address key.
const (
	PlaneTCP  Plane = "tcp"
	PlaneHTTP Plane = "http"
	PlaneNATS Plane = "nats"
)

// ParsePlane parses a plane name case-insensitively.
func ParsePlane(s string) (Plane, error) {
	if p, ok := planeOf(Plane(strings.ToLower(strings.TrimSpace(s)))); ok {
		return p.name, nil
	}
	return "", fmt.Errorf("transport: unknown request plane %q (valid: %s)", s, validPlanes)
}

// Address is where an endpoint is served: the registry's `transport` value.
// Its JSON form is a one-key object, {"tcp":"host:port"},
// {"http":"http://host:port/v1/rpc"} or {"nats":"subject"}.
type Address struct {
	// Kind is the plane that serves the address.
	Kind Plane
	// Addr is host:port for tcp, the base URL for http, the subject for nats.
	Addr string
}

// String returns kind:addr, for logs.
func (a Address) String() string { return string(a.Kind) + ":" + a.Addr }

// MarshalJSON encodes the address as a one-key object.
func (a Address) MarshalJSON() ([]byte, error) {
	if _, err := ParsePlane(string(a.Kind)); err != nil || a.Kind != Plane(strings.ToLower(string(a.Kind))) {
		return nil, fmt.Errorf("transport: cannot marshal address with kind %q (valid: %s)", a.Kind, validPlanes)
	}
	return json.Marshal(map[string]string{string(a.Kind): a.Addr})
}

// UnmarshalJSON decodes a one-key object; any other shape is an error.
func (a *Address) UnmarshalJSON(b []byte) error {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("transport: address must be a JSON object with one string value: %w", err)
	}
	if len(m) != 1 {
		return fmt.Errorf("transport: address must have exactly one key (one of %s), got %d", validPlanes, len(m))
	}
	for k, v := range m {
		p, err := ParsePlane(k)
		if err != nil || string(p) != k {
			return fmt.Errorf("transport: unknown address kind %q (valid: %s)", k, validPlanes)
		}
		if v == "" {
			return fmt.Errorf("transport: empty %s address", k)
		}
		*a = Address{Kind: p, Addr: v}
	}
	return nil
}

// AddressesOf lists the addresses t names, one per plane it serves, in the
// order of the planes (tcp, http, nats). An instance registers one [commonv1.Transport]
// holding every plane it serves (DYN_REQUEST_PLANE=tcp,http serves two).
func AddressesOf(t *commonv1.Transport) []Address {
	var out []Address
	for _, p := range planeSpecs {
		if a := p.address(t); a != "" {
			out = append(out, Address{Kind: p.name, Addr: a})
		}
	}
	return out
}

// Pick returns the address of t to call: the one of plane prefer when t
// has it, otherwise the first of [AddressesOf]. It reports false when t has
// no address at all.
func Pick(t *commonv1.Transport, prefer Plane) (Address, bool) {
	addrs := AddressesOf(t)
	for _, a := range addrs {
		if a.Kind == prefer {
			return a, true
		}
	}
	if len(addrs) == 0 {
		return Address{}, false
	}
	return addrs[0], true
}

// TransportOf is the [commonv1.Transport] naming addrs, as an instance
// registers it. A later address of a plane replaces an earlier one; an
// address of an unknown plane is left out.
func TransportOf(addrs ...Address) *commonv1.Transport {
	t := &commonv1.Transport{}
	for _, a := range addrs {
		if p, ok := planeOf(a.Kind); ok {
			p.setAddress(t, a.Addr)
		}
	}
	return t
}
