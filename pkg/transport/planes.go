package transport

import (
	"strings"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
)

// planeSpecs are the request planes, each registered once: what the registry,
// the SDK, the frontend and the CLI know of a plane they read here. Their
// order is the order addresses are listed in (AddressesOf) and planes are
// named in messages. A new plane is its file (server, client, spec), a
// field of commonv1.Transport for its address, and a line here.
var planeSpecs = []*planeSpec{&tcpPlane, &httpPlane, &natsPlane}

// planeSpec is one request plane.
type planeSpec struct {
	// name is the plane's DYN_REQUEST_PLANE value and the key of its
	// address in the registry's JSON.
	name Plane
	// address and setAddress read and write the plane's address in an
	// instance's registered commonv1.Transport ("" for none).
	address    func(*commonv1.Transport) string
	setAddress func(*commonv1.Transport, string)
	// validate checks an address's form (see addressform.go).
	validate func(addr string) error
	// listen is the host and port a server of cfg binds (port 0: the OS
	// picks one).
	listen func(cfg Config) (host string, port int)
	// newServer and newClient make the plane's server and client; a
	// client that must connect at once (nats) may fail.
	newServer func(cfg Config, o options) Server
	newClient func(cfg Config, o options) (Client, error)
}

// validPlanes names the planes for error messages: "tcp, http, nats".
var validPlanes = planeNames()

func planeNames() string {
	names := make([]string, len(planeSpecs))
	for i, p := range planeSpecs {
		names[i] = string(p.name)
	}
	return strings.Join(names, ", ")
}

// planeOf is the spec of the plane named p, exactly as its constant spells
// it.
func planeOf(p Plane) (*planeSpec, bool) {
	for _, s := range planeSpecs {
		if s.name == p {
			return s, true
		}
	}
	return nil, false
}

// Planes are the request planes, in the order their addresses are listed.
func Planes() []Plane {
	out := make([]Plane, len(planeSpecs))
	for i, p := range planeSpecs {
		out[i] = p.name
	}
	return out
}

// PlaneNames names the request planes for messages: "tcp, http, nats".
func PlaneNames() string { return validPlanes }

// ListenAddress is the host and port a server of cfg's plane binds (port
// 0: the OS picks one): what a health probe dials.
func (c Config) ListenAddress() (host string, port int) {
	return planeOrTCP(c.Plane).listen(c)
}
