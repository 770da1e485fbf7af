// Package partition holds tests that cut real networks between Switchyard's
// processes: each process (an etcd member, a registry, a worker, ...) runs
// in a network namespace of its own, joined to the others by a veth pair on
// one bridge, at an address the test chooses; a cut drops the traffic
// between two namespaces (nftables inside them), and healing removes it.
// Every namespace, link and rule is the test's own and is removed when it
// ends, also on failure (not when the test binary is killed, as by go
// test's -timeout). The package has no code of its own besides its tests.
package partition
