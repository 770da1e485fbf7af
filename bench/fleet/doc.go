// Package fleet is the fleet benchmark behind cmd/fleet-bench: the real
// control plane on loopback (a 3-member etcd cluster, a 3-server NATS
// JetStream cluster with routes, a registry, an eventbus, a router and two
// frontends, each its own process so that its CPU and memory can be read
// from /proc) and fleets of simulated workers that do on the control plane
// what a worker does (see Sim) without an engine. For each fleet size it
// measures every service's cost at steady state, how fast a worker becomes
// routable and unroutable, how fast registrations fan out to the frontends
// and KV events reach the router's index, and the router's and frontend's
// per-request cost; then how each figure grows with the fleet.
//
// The bench starts every part of the plane by running its own binary with
// RoleEnv set (RunChild); a test binary does the same from TestMain. It
// lives in the lab tree: it imports the services and nothing imports it.
package fleet
