#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok,
# helm) and the real node's kubelet, kube-proxy, pause and CoreDNS from the Go module proxy at the versions pinned in hack/versions.env. Binaries land in a cache
# outside the repo, one directory per component and version, and are reused when present.
#
#   hack/build-binaries.sh            # build whatever is missing, print where the binaries are
#   RAILYARD_CACHE=/path hack/...     # choose the cache (default ~/.cache/railyard)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
source "$here/versions.env"
cache=${RAILYARD_CACHE:-$HOME/.cache/railyard}
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

# A Go the modules accept (GO_VERSION): the machine's, or the pinned toolchain through the module proxy.
# shellcheck disable=SC1091
source "$here/go-toolchain.sh"
ensure_go || { echo "error: no Go >= $GO_VERSION to build the control plane (see above)" >&2; exit 1; }

stamp() { date +%s; }
# Where the module cache holds MODULE@VERSION's source (for files a binary needs beside it).
module_dir() { go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)",/\1/p'; }
# Where it holds MODULE@VERSION's go.mod (its replace block is what a wrapper module copies).
module_gomod() { go mod download -json "$1" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p'; }
say() { printf '[build] %s\n' "$*" >&2; }
# A command a build step needs that hack/deps.sh installs: stop naming it, rather than fail halfway.
need() { command -v "$1" >/dev/null || { echo "error: $1 not found (hack/deps.sh installs it)" >&2; exit 1; }; }
# Replace OUT with what was built in OUT.tmp (files copied from the read-only module cache made
# writable first) and say how long it took: publish LABEL OUT T0.
publish() {
  chmod -R u+w "$2.tmp"
  rm -rf "$2"; mv "$2.tmp" "$2"
  say "$1: built in $(( $(stamp) - $3 )) s"
}

build_kubernetes() {
  local out="$cache/bin/kubernetes-$KUBERNETES_VERSION"
  if [[ -x $out/kube-apiserver && -x $out/kube-controller-manager && -x $out/kube-scheduler && -x $out/kubectl ]]; then
    say "kubernetes $KUBERNETES_VERSION: cached in $out"; return
  fi
  local t0; t0=$(stamp)
  local src="$cache/src/kubernetes-$KUBERNETES_VERSION"
  mkdir -p "$src" "$out.tmp"
  say "kubernetes $KUBERNETES_VERSION: resolving module and its staging replace block"
  local gomod
  gomod=$(cd "$src" && module_gomod "k8s.io/kubernetes@$KUBERNETES_VERSION")
  # k8s.io/kubernetes replaces its staging modules with ./staging/src/...; a consumer module must
  # pin each to the matching published v0.X.Y, as sigs.k8s.io/scheduler-plugins does.
  local staging_version="v0.${KUBERNETES_VERSION#v1.}"
  {
    echo "module railyard.dev/hack/kubernetes"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod" | while read -r m; do
      echo "	$m => $m $staging_version"
    done
    echo ")"
  } > "$src/go.mod"
  # The sample-* staging modules are never required by the commands and are not all published.
  sed -i '/sample-/d' "$src/go.mod"
  printf 'package main\n' > "$src/doc.go"
  say "kubernetes $KUBERNETES_VERSION: building kube-apiserver kube-controller-manager kube-scheduler kubectl (cold: ~5 min on 2 cores)"
  local minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$src" && go build -trimpath -ldflags "$ld" -o "$out.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl)
  publish "kubernetes $KUBERNETES_VERSION" "$out" "$t0"
}

# The real node's binaries: kubelet and kube-proxy from the same k8s.io/kubernetes module (the
# control plane's wrapper module, built into a directory of their own so the control plane's cache
# stays valid), and the pause image's binary from the module's build/pause/linux/pause.c.
build_node() {
  local out="$cache/bin/kubernetes-node-$KUBERNETES_VERSION"
  if [[ -x $out/kubelet && -x $out/kube-proxy && -x $out/pause ]]; then
    say "kubelet/kube-proxy $KUBERNETES_VERSION: cached in $out"; return
  fi
  build_kubernetes
  local t0; t0=$(stamp)
  local src="$cache/src/kubernetes-$KUBERNETES_VERSION"
  mkdir -p "$out.tmp"
  say "kubelet/kube-proxy $KUBERNETES_VERSION: building (warm Go cache ~30 s, cold ~7 min on 2 cores)"
  local minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$src" && go build -trimpath -ldflags "$ld" -o "$out.tmp/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
  need gcc
  gcc -Os -static -DVERSION="$KUBERNETES_VERSION" -o "$out.tmp/pause" \
    "$(cd "$src" && module_dir "k8s.io/kubernetes@$KUBERNETES_VERSION")/build/pause/linux/pause.c"
  publish "kubelet/kube-proxy $KUBERNETES_VERSION" "$out" "$t0"
}

# The real node's cluster DNS: CoreDNS with only the plugins the rig uses (its main module has no
# replace directives; the plugin list is a generated file, rewritten here instead of `go generate`).
build_coredns() {
  local out="$cache/bin/coredns-$COREDNS_VERSION"
  if [[ -x $out/coredns ]]; then say "coredns $COREDNS_VERSION: cached in $out"; return; fi
  local t0; t0=$(stamp)
  local src="$cache/src/coredns-$COREDNS_VERSION"
  rm -rf "$src"; mkdir -p "$(dirname "$src")" "$out.tmp"
  cp -r "$(module_dir "github.com/coredns/coredns@$COREDNS_VERSION")" "$src"
  chmod -R u+w "$src"
  {
    echo "// Generated by hack/build-binaries.sh: the rig's CoreDNS plugins only."
    echo "package plugin"
    echo
    echo "import ("
    for p in bind cache errors forward health kubernetes log loop ready; do
      echo "	_ \"github.com/coredns/coredns/plugin/$p\""
    done
    echo ")"
  } > "$src/core/plugin/zplugin.go"
  say "coredns $COREDNS_VERSION: building"
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/coredns" .)
  publish "coredns $COREDNS_VERSION" "$out" "$t0"
}

build_etcd() {
  local out="$cache/bin/etcd-$ETCD_VERSION"
  if [[ -x $out/etcd ]]; then say "etcd $ETCD_VERSION: cached in $out"; return; fi
  local t0; t0=$(stamp)
  local src="$cache/src/etcd-$ETCD_VERSION"
  mkdir -p "$src" "$out.tmp"
  # etcd's own main module carries replace directives, so `go install pkg@version` refuses it;
  # a two-line wrapper around etcdmain builds the same server.
  cat > "$src/go.mod" <<GOMOD
module railyard.dev/hack/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
  cat > "$src/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  say "etcd $ETCD_VERSION: building"
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" .)
  publish "etcd $ETCD_VERSION" "$out" "$t0"
}

build_kwok() {
  local out="$cache/bin/kwok-$KWOK_VERSION"
  if [[ -x $out/kwok && -d $out/stages ]]; then say "kwok $KWOK_VERSION: cached in $out"; return; fi
  local t0; t0=$(stamp)
  mkdir -p "$out.tmp"
  say "kwok $KWOK_VERSION: building"
  GOBIN="$out.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # kwok runs no lifecycle without Stage objects; keep the upstream "fast" stages of this version.
  local moddir
  moddir=$(module_dir "sigs.k8s.io/kwok@$KWOK_VERSION")
  mkdir -p "$out.tmp/stages"
  cp "$moddir"/kustomize/stage/node/fast/node-initialize.yaml \
     "$moddir"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
     "$moddir"/kustomize/stage/pod/fast/pod-ready.yaml \
     "$moddir"/kustomize/stage/pod/fast/pod-complete.yaml \
     "$moddir"/kustomize/stage/pod/fast/pod-delete.yaml "$out.tmp/stages/"
  publish "kwok $KWOK_VERSION" "$out" "$t0"
}

build_helm() {
  local out="$cache/bin/helm-$HELM_VERSION"
  if [[ -x $out/helm ]]; then say "helm $HELM_VERSION: cached in $out"; return; fi
  local t0; t0=$(stamp)
  mkdir -p "$out.tmp"
  say "helm $HELM_VERSION: building"
  GOBIN="$out.tmp" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  publish "helm $HELM_VERSION" "$out" "$t0"
}

# Peers for `make compare` (opt-in: `hack/build-binaries.sh kueue volcano`; never part of `make test`).
build_kueue() {
  local out="$cache/bin/kueue-$KUEUE_VERSION"
  if [[ -x $out/kueue && -d $out/crds ]]; then say "kueue $KUEUE_VERSION: cached in $out"; return; fi
  local t0; t0=$(stamp)
  mkdir -p "$out.tmp/crds"
  say "kueue $KUEUE_VERSION: building (cold: ~3.5 min on 2 cores)"
  # exclude_scheduler_library compiles out the alpha simulator (off by default) and with it every
  # k8s.io/kubernetes package.
  GOBIN="$out.tmp" go install -trimpath -tags exclude_scheduler_library -ldflags "-s -w" \
    "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  cp "$(module_dir "sigs.k8s.io/kueue@$KUEUE_VERSION")"/config/components/crd/bases/*.yaml "$out.tmp/crds/"
  publish "kueue $KUEUE_VERSION" "$out" "$t0"
}

# A controller built from a wrapper module: the proxy serves the exact version but refuses to list the module's
# versions, which `go install pkg@version` asks for (its deprecation check).
# build_wrapped NAME VERSION MODULE PACKAGE CRD_DIR [CRD_GLOB] (CRD_DIR: where the module keeps its CRDs)
build_wrapped() {
  local name=$1 version=$2 module=$3 package=$4 crds=$5 glob=${6:-*.yaml}
  local out="$cache/bin/$name-$version"
  if [[ -x $out/$name && -d $out/crds ]]; then say "$name $version: cached in $out"; return; fi
  local t0; t0=$(stamp)
  mkdir -p "$out.tmp/crds"
  say "$name $version: building"
  local src="$cache/src/$name-$version"
  mkdir -p "$src"
  printf 'module railyard.dev/hack/%s\n\ngo 1.24\n\nrequire %s %s\n' "$name" "$module" "$version" > "$src/go.mod"
  printf 'package main\n' > "$src/doc.go"
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/$name" "$package")
  local dir; dir=$(cd "$src" && module_dir "$module@$version")
  cp "$dir/$crds"/$glob "$out.tmp/crds/"
  local extra; for extra in ${WRAPPED_EXTRA:-}; do cp "$dir/$extra" "$out.tmp/"; done  # files the tests need
  publish "$name $version" "$out" "$t0"
}

# The controllers of the workloads Railyard places without owning them, for their e2e tests (docs/workloads.md).
build_jobset() {
  build_wrapped jobset "$JOBSET_VERSION" sigs.k8s.io/jobset sigs.k8s.io/jobset config/components/crd/bases
}

build_lws() {
  build_wrapped lws "$LWS_VERSION" sigs.k8s.io/lws sigs.k8s.io/lws/cmd config/crd/bases
}

# Kubeflow Trainer v2: its TrainJobs run as JobSets (the JobSet controller is needed beside it); its torch
# runtime (ClusterTrainingRuntime torch-distributed) and its webhooks' manifest are kept beside the binary.
build_trainer() {
  WRAPPED_EXTRA="manifests/base/runtimes/torch_distributed.yaml manifests/base/webhook/manifests.yaml" \
    build_wrapped trainer "$TRAINER_VERSION" github.com/kubeflow/trainer/v2 \
    github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager manifests/base/crds 'trainer.kubeflow.org_*.yaml'
}

# Volcano v1.14.1 (v1.15 cannot be built from the proxy: its module zip omits the staging/ apis
# module it replaces). Its go.mod has replace directives a consumer must copy, so it is built from a
# wrapper module, with volcano.sh/apis pinned to v1.14.0 (the same source as its staging copy).
build_volcano() {
  local out="$cache/bin/volcano-$VOLCANO_VERSION"
  if [[ -x $out/vc-scheduler && -x $out/vc-controller-manager && -d $out/crds ]]; then
    say "volcano $VOLCANO_VERSION: cached in $out"; return
  fi
  local t0; t0=$(stamp)
  local src="$cache/src/volcano-$VOLCANO_VERSION"
  mkdir -p "$src" "$out.tmp/crds"
  local gomod
  gomod=$(cd "$src" && module_gomod "volcano.sh/volcano@$VOLCANO_VERSION")
  {
    echo "module railyard.dev/hack/volcano"
    echo
    echo "go 1.26.0"
    echo
    echo "require volcano.sh/volcano $VOLCANO_VERSION"
    echo
    sed -n '/^replace (/,/^)/p' "$gomod" \
      | sed "s#volcano.sh/apis => ./staging/src/volcano.sh/apis#volcano.sh/apis => volcano.sh/apis $VOLCANO_APIS_VERSION#" \
      | grep -v '^\s*//' | grep -v 'sample-\|legacy-cloud-providers\|node-api'
  } > "$src/go.mod"
  printf 'package main\n' > "$src/doc.go"
  say "volcano $VOLCANO_VERSION: building vc-scheduler vc-controller-manager (cold: several minutes on 2 cores)"
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/" \
      volcano.sh/volcano/cmd/scheduler volcano.sh/volcano/cmd/controller-manager)
  mv "$out.tmp/scheduler" "$out.tmp/vc-scheduler"
  mv "$out.tmp/controller-manager" "$out.tmp/vc-controller-manager"
  # Every CRD, the job flow ones too: vc-controller-manager waits for all its informers to sync.
  local vcdir; vcdir=$(cd "$src" && module_dir "volcano.sh/volcano@$VOLCANO_VERSION")
  cp "$vcdir"/config/crd/volcano/bases/*.yaml "$vcdir"/config/crd/jobflow/bases/*.yaml "$out.tmp/crds/"
  publish "volcano $VOLCANO_VERSION" "$out" "$t0"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(etcd kwok kubernetes helm node coredns)
for t in "${targets[@]}"; do
  case $t in
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    kubernetes) build_kubernetes ;;
    helm) build_helm ;;
    node) build_node ;;
    coredns) build_coredns ;;
    kueue) build_kueue ;;
    volcano) build_volcano ;;
    jobset) build_jobset ;;
    lws) build_lws ;;
    trainer) build_trainer ;;
    *) echo "error: unknown component '$t' (etcd|kwok|kubernetes|helm|node|coredns|kueue|volcano|jobset|lws|trainer)" >&2; exit 2 ;;
  esac
done
