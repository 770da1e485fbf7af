#!/usr/bin/env bash
# Builds the binaries envtest needs (kube-apiserver and etcd) from Go modules, once,
# and prints the directory to use as KUBEBUILDER_ASSETS.
#
#   export KUBEBUILDER_ASSETS="$(hack/envtest-binaries.sh)"
#
# The versions come from tools/envtest/go.mod (a module of its own so that
# k8s.io/kubernetes never enters the main go.mod). Binaries are cached under
# ${SWITCHYARD_ENVTEST_CACHE:-$HOME/.cache/switchyard-envtest}/<kubernetes>-<etcd>;
# a cold build takes several minutes, a warm call returns at once.
set -euo pipefail
cd "$(dirname "$0")/../tools/envtest"

kube=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
dir="${SWITCHYARD_ENVTEST_CACHE:-$HOME/.cache/switchyard-envtest}/kubernetes-${kube}_etcd-${etcd}"

if [ ! -x "$dir/kube-apiserver" ] || [ ! -x "$dir/etcd" ]; then
  mkdir -p "$dir"
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "envtest-binaries: building kube-apiserver $kube and etcd $etcd into $dir (several minutes)" >&2
  go build -trimpath -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  go build -trimpath -o "$tmp/etcd" go.etcd.io/etcd/server/v3
  mv -f "$tmp/kube-apiserver" "$tmp/etcd" "$dir/"
fi
echo "$dir"
