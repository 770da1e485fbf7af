#!/usr/bin/env bash
# Builds the binaries the envtest suites need (kube-apiserver and etcd for
# envtest itself, kube-controller-manager for the garbage collector) from Go
# modules, once, and prints the directory to use as KUBEBUILDER_ASSETS.
#
#   assets="$(hack/envtest-binaries.sh)" && export KUBEBUILDER_ASSETS="$assets"
#
# The versions come from tools/envtest/go.mod (a module of its own so that
# k8s.io/kubernetes never enters the main go.mod). Binaries are cached under
# ${SWITCHYARD_ENVTEST_CACHE:-$HOME/.cache/switchyard-envtest}/<kubernetes>_<etcd>;
# a cold build takes several minutes, a warm call returns at once.
set -euo pipefail
cd "$(dirname "$0")/../tools/envtest"

kube=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
dir="${SWITCHYARD_ENVTEST_CACHE:-$HOME/.cache/switchyard-envtest}/kubernetes-${kube}_etcd-${etcd}"

declare -A pkgs=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [etcd]=go.etcd.io/etcd/server/v3
)
mkdir -p "$dir"
for bin in kube-apiserver etcd kube-controller-manager; do
  [ -x "$dir/$bin" ] && continue
  echo "envtest-binaries: building $bin (kubernetes $kube, etcd $etcd) into $dir; this takes minutes" >&2
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  go build -trimpath -o "$tmp/$bin" "${pkgs[$bin]}"
  mv -f "$tmp/$bin" "$dir/$bin"
  rm -rf "$tmp"
done
echo "$dir"
