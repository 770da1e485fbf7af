// Package helm holds the tests of the Switchyard Helm chart in
// deploy/helm/switchyard: rendered with the helm of tools/go.mod, its
// containers' arguments parsed by the services' own flags, and every object
// server-side applied to a real kube-apiserver (envtest).
package helm
