#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, from Go modules and
# Debian packages only (no image can be pulled here), to run the Helm chart
# with real pods: make images, then
#
#   sudo hack/kube-node.sh up        # control plane, containerd, kubelet, kube-proxy, DNS; loads bin/images
#   sudo hack/kube-node.sh install   # helm install of deploy/helm/switchyard (extra helm flags after it)
#   sudo hack/kube-node.sh check     # the README's curl against the frontend Service, until it answers
#   sudo hack/kube-node.sh down      # stops everything and removes what up made (rules, bridge, state)
#
# The parts, each from where this machine can get it:
# - etcd, kube-apiserver, kube-controller-manager, kube-scheduler: the
#   envtest binaries (hack/envtest-binaries.sh, tools/envtest: Kubernetes
#   1.37), with token authentication and AlwaysAllow authorization.
# - kubelet and kube-proxy: tools/kubenode, Kubernetes 1.34 (three minor
#   releases below the API server, the skew Kubernetes supports). 1.34 runs
#   on what this host has (cgroup v1 and Debian's containerd 1.6) with
#   failCgroupV1 off; newer kubelets were not tried.
# - containerd and runc: Debian's containerd package, a private instance
#   (own socket and state under the state directory, so a Docker engine's
#   containerd is left alone). restrict_oom_score_adj is on: this host does
#   not let root lower a process's oom_score_adj, which the sandbox asks for.
# - CNI: Debian's containernetworking-plugins (bridge, host-local, portmap,
#   loopback) on 10.244.0.0/24.
# - The pause image: tools/kubenode/pause writes its own image.
# - Cluster DNS: CoreDNS (github.com/coredns/coredns, go install) on the
#   node's address, the kubelet's clusterDNS.
# - Our images: bin/images/*.tar from make images, imported into
#   containerd's k8s.io namespace under the names the chart asks for.
#
# KUBE_NODE_DIR (default /tmp/switchyard-kube-node) holds the state, logs
# and the kubeconfig (admin token); binaries are cached under
# ${SWITCHYARD_KUBE_NODE_CACHE:-$HOME/.cache/switchyard-kube-node}. Root is
# needed (containerd, kubelet, iptables).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${KUBE_NODE_DIR:-/tmp/switchyard-kube-node}
cache=${SWITCHYARD_KUBE_NODE_CACHE:-$HOME/.cache/switchyard-kube-node}
token=switchyard-kube-node-admin
port=16443
release=${RELEASE:-sy}
namespace=${NAMESPACE:-switchyard}

say() { echo "kube-node: $*" >&2; }

# node_ip is the address pods and the API server's endpoints use: the
# source address of the default route, else the first global address.
node_ip() {
  local ip
  ip=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}')
  [ -n "$ip" ] || ip=$(ip -4 -o addr show scope global | awk '{split($4, a, "/"); print a[1]; exit}')
  [ -n "$ip" ] || { say "no global IPv4 address"; exit 1; }
  echo "$ip"
}

# wait_for runs its command until it succeeds, at most $1 seconds.
wait_for() {
  local limit=$1 what=$2
  shift 2
  for _ in $(seq "$limit"); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  say "$what: not within ${limit}s (logs in $dir/log)"
  exit 1
}

node_ready() {
  api /api/v1/nodes/node | python3 -c 'import json, sys
sys.exit(0 if any(c["type"] == "Ready" and c["status"] == "True" for c in json.load(sys.stdin)["status"]["conditions"]) else 1)'
}

api() { curl -fsSk -H "Authorization: Bearer $token" "https://$(node_ip):$port$1"; }

start() { # name command...: runs a daemon with its log in $dir/log/<name>.log
  local name=$1
  shift
  nohup "$@" >"$dir/log/$name.log" 2>&1 &
  echo $! >"$dir/run/$name.pid"
}

build() {
  mkdir -p "$cache"
  local envtest
  envtest=$("$root/hack/envtest-binaries.sh")
  ln -sfn "$envtest" "$cache/envtest-current"
  if [ ! -x "$envtest/kube-scheduler" ]; then
    say "building kube-scheduler"
    (cd "$root/tools/envtest" && go build -trimpath -o "$envtest/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler)
  fi
  for b in kubelet kube-proxy; do
    [ -x "$cache/$b" ] && continue
    say "building $b (minutes)"
    (cd "$root/tools/kubenode" && go build -trimpath -o "$cache/$b" "k8s.io/kubernetes/cmd/$b")
  done
  [ -x "$cache/pause" ] || (cd "$root/tools/kubenode" && CGO_ENABLED=0 go build -trimpath -o "$cache/pause" ./pause)
  [ -x "$cache/coredns" ] || { say "building coredns"; GOBIN="$cache" GOFLAGS= go install github.com/coredns/coredns@v1.15.0; }
}

up() {
  [ "$(id -u)" = 0 ] || { say "run as root"; exit 1; }
  [ -e "$dir/run" ] && { say "$dir exists: run down first"; exit 1; }
  for t in containerd runc iptables; do command -v $t >/dev/null || { say "needs $t (apt-get install containerd iptables)"; exit 1; }; done
  [ -x /usr/lib/cni/bridge ] || { say "needs /usr/lib/cni (apt-get install containernetworking-plugins)"; exit 1; }
  ls "$root"/bin/images/*.tar >/dev/null 2>&1 || { say "no bin/images/*.tar: run make images"; exit 1; }
  build
  local bin=$cache/envtest-current ip
  ip=$(node_ip)
  mkdir -p "$dir"/{log,run,pki,etcd,containerd/root,containerd/state,cni,kubelet}
  openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null
  echo "$token,admin,admin,\"system:masters\"" >"$dir/pki/tokens.csv"
  # A CA of the cluster's own and the API server's certificate from it, for
  # the names pods reach it by (the kubernetes Service's first address and
  # DNS names) and the node's address: pods verify it with the CA the
  # controller manager publishes (kube-root-ca.crt).
  openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj /CN=switchyard-kube-node-ca \
    -keyout "$dir/pki/ca.key" -out "$dir/pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout "$dir/pki/apiserver.key" \
    -out "$dir/pki/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:10.96.0.1,IP:%s,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n' "$ip" >"$dir/pki/san.ext"
  openssl x509 -req -in "$dir/pki/apiserver.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" -CAcreateserial -days 7 \
    -extfile "$dir/pki/san.ext" -out "$dir/pki/apiserver.crt" 2>/dev/null
  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: node, cluster: {server: "https://$ip:$port", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: $token}}]
contexts: [{name: node, context: {cluster: node, user: admin}}]
current-context: node
EOF
  start etcd "$bin/etcd" --data-dir "$dir/etcd" --listen-client-urls http://127.0.0.1:22379 \
    --advertise-client-urls http://127.0.0.1:22379 --listen-peer-urls http://127.0.0.1:22380
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:22379 --secure-port=$port \
    --bind-address=0.0.0.0 --advertise-address="$ip" --tls-cert-file="$dir/pki/apiserver.crt" \
    --tls-private-key-file="$dir/pki/apiserver.key" --client-ca-file="$dir/pki/ca.crt" --service-cluster-ip-range=10.96.0.0/16 \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local --service-account-key-file="$dir/pki/sa.pub" \
    --service-account-signing-key-file="$dir/pki/sa.key" --token-auth-file="$dir/pki/tokens.csv" \
    --authorization-mode=AlwaysAllow --allow-privileged=true
  wait_for 60 "the API server" api /readyz
  start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$dir/kubeconfig" \
    --service-account-private-key-file="$dir/pki/sa.key" --root-ca-file="$dir/pki/ca.crt" --leader-elect=false --controllers='*,-nodeipam' --secure-port=0
  cat >"$dir/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $dir/kubeconfig}
leaderElection: {leaderElect: false}
EOF
  start kube-scheduler "$bin/kube-scheduler" --config="$dir/scheduler.yaml" --secure-port=0

  cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
EOF
  cat >"$dir/cni/10-bridge.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "switchyard-kube-node", "plugins": [
  {"type": "bridge", "bridge": "cni-sykn0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
EOF
  start containerd containerd --config "$dir/containerd.toml"
  local ctr="ctr -a $dir/containerd/containerd.sock -n k8s.io"
  wait_for 30 "containerd" $ctr version
  "$cache/pause" -image "$dir/pause.tar"
  $ctr images import "$dir/pause.tar" >/dev/null
  for f in "$root"/bin/images/*.tar; do $ctr images import "$f" >/dev/null; done
  say "images: $($ctr images ls -q | grep -v '^sha256:' | tr '\n' ' ')"

  cat >"$dir/Corefile" <<EOF
.:53 {
    bind $ip
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $dir/kubeconfig node
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
}
EOF
  start coredns "$cache/coredns" -conf "$dir/Corefile"
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
clusterDNS: [$ip]
clusterDomain: cluster.local
port: 20250
readOnlyPort: 0
healthzPort: 20248
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  start kubelet "$cache/kubelet" --config="$dir/kubelet.yaml" --kubeconfig="$dir/kubeconfig" --hostname-override=node \
    --node-ip="$ip" --root-dir="$dir/kubelet"
  start kube-proxy "$cache/kube-proxy" --kubeconfig="$dir/kubeconfig" --hostname-override=node --cluster-cidr=10.244.0.0/16 \
    --proxy-mode=iptables --metrics-bind-address=127.0.0.1:20249 --healthz-bind-address=127.0.0.1:20256
  wait_for 90 "node Ready" node_ready
  say "up: KUBECONFIG=$dir/kubeconfig (node $ip)"
}

install() {
  local helm
  helm=$(cd "$root" && go tool -modfile=tools/go.mod -n helm)
  KUBECONFIG="$dir/kubeconfig" "$helm" install "$release" "$root/deploy/helm/switchyard" --namespace "$namespace" \
    --create-namespace --wait --timeout 5m "$@"
}

check() {
  local svc ip
  svc=$(api "/api/v1/namespaces/$namespace/services/$release-switchyard-frontend")
  ip=$(printf '%s' "$svc" | python3 -c 'import json, sys; print(json.load(sys.stdin)["spec"]["clusterIP"])')
  say "frontend Service at $ip:8000"
  wait_for 120 "a model listed on /v1/models" sh -c "curl -fsS http://$ip:8000/v1/models | grep -q '\"id\"'"
  local model
  model=$(curl -fsS "http://$ip:8000/v1/models" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')
  curl -fsS "http://$ip:8000/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$model\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 16}"
  echo
}

# stop ends the daemon start ran as $1: SIGTERM, then SIGKILL after 10 s.
stop() {
  local pid
  [ -f "$dir/run/$1.pid" ] || return 0
  pid=$(cat "$dir/run/$1.pid")
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

# clean_host removes what the kubelet and the CNI plugins left in the host's
# network when they were stopped without tearing their pods down: the pods'
# network namespaces (containerd names them cni-*), the masquerade rules
# that name the network $1 and their chains, the kubelet's KUBE-FIREWALL and
# canary chains in every table and family, and the bridge.
clean_host() {
  local net=$1 t chain
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ {print $1}'); do ip netns delete "$ns" 2>/dev/null || true; done
  for ipt in iptables ip6tables; do
    command -v $ipt >/dev/null || continue
    $ipt -t nat -S POSTROUTING 2>/dev/null | grep -F "name: \\\"$net\\\"" | while read -r rule; do
      eval "$ipt -t nat ${rule/-A/-D}" 2>/dev/null || true
    done || true
    for chain in $($ipt -t nat -S 2>/dev/null | grep -F "name: \\\"$net\\\"" | awk '$1 == "-A" && $2 ~ /^CNI-/ {print $2}' | sort -u); do
      $ipt -t nat -F "$chain" 2>/dev/null && $ipt -t nat -X "$chain" 2>/dev/null || true
    done
    for t in filter nat mangle; do
      for c in INPUT OUTPUT; do $ipt -t $t -D $c -j KUBE-FIREWALL 2>/dev/null || true; done
      for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
        $ipt -t $t -F $chain 2>/dev/null && $ipt -t $t -X $chain 2>/dev/null || true
      done
    done
  done
  ip link delete cni-sykn0 2>/dev/null || true
}

down() {
  if [ -f "$dir/kubeconfig" ]; then
    local helm
    helm=$(cd "$root" && go tool -modfile=tools/go.mod -n helm)
    KUBECONFIG="$dir/kubeconfig" timeout 60 "$helm" uninstall "$release" --namespace "$namespace" --wait >/dev/null 2>&1 || true
  fi
  for name in kube-proxy kubelet coredns kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop "$name"
  done
  if [ -S "$dir/containerd/containerd.sock" ]; then
    local ctr="ctr -a $dir/containerd/containerd.sock -n k8s.io"
    for t in $($ctr tasks ls -q 2>/dev/null); do $ctr tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    sleep 1
    for c in $($ctr containers ls -q 2>/dev/null); do $ctr tasks rm -f "$c" >/dev/null 2>&1 || true; $ctr containers rm "$c" >/dev/null 2>&1 || true; done
  fi
  stop containerd
  [ -x "$cache/kube-proxy" ] && "$cache/kube-proxy" --cleanup >/dev/null 2>&1 || true
  clean_host "switchyard-kube-node"
  { grep -o " $dir/[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$dir"
  say "down"
}

case "${1:-}" in
up | check | down) "$1" ;;
install) shift; install "$@" ;;
*) echo "usage: $0 up | install [helm flags] | check | down" >&2; exit 2 ;;
esac
