#!/usr/bin/env bash
# Builds a Kubernetes v1.20.2 control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler) from Debian 12's `kubernetes` source package, offline, with Debian's Go 1.19,
# and puts Debian's etcd 3.4 beside them, in
#   ${KUBERL_CONTROL_PLANE_CACHE:-$HOME/.cache/kuberl/k8s-1.20.2}/bin
# A stamp file makes later runs return at once. Installs what it needs with apt (run as root on a
# fresh Debian 12 machine). See docs/testing.md and issue 15 for why each step is here.
set -euo pipefail

K8S_VERSION=1.20.2
DEB_VERSION=1.20.5+really1.20.2-1.1+deb12u1
CACHE=${KUBERL_CONTROL_PLANE_CACHE:-$HOME/.cache/kuberl/k8s-$K8S_VERSION}
BIN=$CACHE/bin
RECIPE=1  # raise it when a step below changes, so that cached binaries are rebuilt
STAMP=$BIN/.built-$DEB_VERSION-recipe$RECIPE
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler)

log() { printf '[control-plane %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

built() {
    [ -f "$STAMP" ] || return 1
    for name in etcd "${COMPONENTS[@]}"; do [ -x "$BIN/$name" ] || return 1; done
}
if built; then
    log "cached: $BIN"
    exit 0
fi

APT_PACKAGES=(dpkg-dev golang-go etcd-server golang-github-modern-go-reflect2-dev rsync jq make)
SOURCES_FILE=/etc/apt/sources.list.d/kuberl-bookworm-src.sources
apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }

install_build_dependencies() {
    if ! apt-cache showsrc kubernetes 2>/dev/null | grep -qxF "Version: $DEB_VERSION"; then
        [ "$(id -u)" = 0 ] || { log "needs root to add a deb-src entry and apt-get install"; exit 1; }
        log "adding $SOURCES_FILE"
        cat > "$SOURCES_FILE" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
        apt_get update -q
    fi
    local missing=()
    for package in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || { log "needs root to install: ${missing[*]}"; exit 1; }
        log "apt-get install ${missing[*]}"
        apt_get install -y -q --no-install-recommends "${missing[@]}"
    fi
}

# The tree sits at $GOPATH/src/k8s.io/kubernetes: 1.20 builds in GOPATH mode (-mod=vendor fails).
GOPATH_DIR=$CACHE/gopath
TREE=$GOPATH_DIR/src/k8s.io/kubernetes

fetch_source() {
    [ -f "$TREE/.kuberl-unpacked" ] && return
    log "apt-get source kubernetes=$DEB_VERSION"
    rm -rf "$CACHE/src" "$TREE"
    mkdir -p "$CACHE/src" "$(dirname "$TREE")"
    (cd "$CACHE/src" && apt-get source -q "kubernetes=$DEB_VERSION" >/dev/null)
    local unpacked
    unpacked=$(find "$CACHE/src" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*')
    mv "$unpacked" "$TREE"
    rm -rf "$CACHE/src"
    touch "$TREE/.kuberl-unpacked"
}

go_env() {
    export GOPATH=$GOPATH_DIR GO111MODULE=off CGO_ENABLED=0 GOPROXY=off GOFLAGS= \
        GOCACHE=$CACHE/go-build GOTOOLCHAIN=local
}

generate_openapi() {
    [ -f "$TREE/pkg/generated/openapi/zz_generated.openapi.go" ] && return
    log "make gen_openapi (not shipped in the tarball)"
    (cd "$TREE" && go_env && make gen_openapi >"$CACHE/gen_openapi.log" 2>&1) \
        || { tail -30 "$CACHE/gen_openapi.log" >&2; exit 1; }
}

# Two fixes go in through `go build -overlay`, so the tree stays as shipped:
# - vendored modern-go/reflect2 1.0.1 crashes under Go 1.18+ (SIGSEGV in mapiterinit on the
#   first custom resource write): Debian's 1.0.2 replaces its files;
# - the vendored OpenAPI validator treats "" as null under Go 1.16+ (kubernetes issue 99804):
#   only `data == nil` may mean null, as upstream's fix has it.
write_overlay() {
    local overlay=$CACHE/overlay
    rm -rf "$overlay" && mkdir -p "$overlay"
    local entries=()
    local vendored=$TREE/vendor/github.com/modern-go/reflect2
    local debian=/usr/share/gocode/src/github.com/modern-go/reflect2
    local file
    # the assembly files are the same in both versions
    for file in "$vendored"/*.go; do
        entries+=("$(jq -n --arg k "$file" '{($k): ""}')")
    done
    for file in "$debian"/*.go; do
        case "$file" in *_test.go) continue ;; esac
        entries+=("$(jq -n --arg k "$vendored/$(basename "$file")" --arg v "$(readlink -f "$file")" '{($k): $v}')")
    done
    local pattern='reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data))'
    local validator
    validator=$(grep -rlF --include=type.go "$pattern" "$TREE/vendor/k8s.io/kube-openapi") \
        || { log "validator's empty-string check not found in vendor/"; exit 1; }
    for file in $validator; do
        local patched
        patched=$overlay/$(echo "${file#"$TREE"/}" | tr / _)
        sed "s/data == nil || $(printf '%s' "$pattern" | sed 's/[][\.*^$/]/\\&/g')/data == nil/" "$file" >"$patched"
        grep -qF "$pattern" "$patched" && { log "could not patch $file"; exit 1; }
        entries+=("$(jq -n --arg k "$file" --arg v "$patched" '{($k): $v}')")
    done
    printf '%s\n' "${entries[@]}" | jq -s '{Replace: add}' >"$overlay/overlay.json"
}

compile() {
    local pkg=k8s.io/kubernetes/vendor/k8s.io
    local ldflags=""
    local key value
    for key in gitVersion=v$K8S_VERSION gitMajor=1 gitMinor=20 gitTreeState=archive \
               "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
        value=${key#*=}; key=${key%%=*}
        ldflags+=" -X $pkg/component-base/version.$key=$value -X $pkg/client-go/pkg/version.$key=$value"
    done
    local staging=$CACHE/staging-bin
    rm -rf "$staging" && mkdir -p "$staging"
    log "go build ${COMPONENTS[*]} ($(go version | cut -d' ' -f3), $(nproc) cores)"
    local start=$SECONDS
    (cd "$TREE" && go_env && go build -tags selinux,notest -overlay "$CACHE/overlay/overlay.json" \
        -ldflags "$ldflags" -o "$staging/" "${COMPONENTS[@]/#/./cmd/}")
    log "compiled in $((SECONDS - start)) s"
    mkdir -p "$BIN"
    for name in "${COMPONENTS[@]}"; do mv "$staging/$name" "$BIN/$name"; done
    rmdir "$staging"
    ln -sfn "$(command -v etcd)" "$BIN/etcd"
}

install_build_dependencies
fetch_source
generate_openapi
write_overlay
compile
touch "$STAMP"
"$BIN/kube-apiserver" --version >&2
log "ready: $BIN"
ls -l "$BIN" >&2
