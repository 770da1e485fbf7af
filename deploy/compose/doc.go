// Package compose holds the test that runs the project's docker-compose.yaml
// as users do, in a real Docker engine: the images `make images` and `make
// test-images` build, `docker compose up --no-build`, requests through the
// published ports, and the faults a compose deployment meets (etcd killed,
// NATS restarted), each counted in a table row. The package has no code of
// its own besides its tests.
package compose
