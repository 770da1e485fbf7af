// Package observability holds the Prometheus scrape configuration and the
// Grafana dashboard of deploy/observability, and the test that every metric
// a dashboard panel queries is served by a running stack.
package observability
