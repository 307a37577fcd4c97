#!/usr/bin/env bash
# Build kuberl's images with podman on a machine without a Docker engine, and without a registry
# if need be: `make images-local` calls this as
#
#     images/build-local.sh operator=TAG trainer=TAG ...
#
# 1. The base image (the Dockerfiles' FROM, python:3.11-slim) is used when podman has it, pulled
#    when a registry answers, and otherwise made here: a Debian bookworm minbase tree from the
#    host's Debian mirror (debootstrap) with Debian's Python 3.11 linked where python:3.11-slim
#    has its own (/usr/local/bin), imported under the FROM name and labelled as a stand-in.
# 2. `podman build --pull=never` of each images/NAME.Dockerfile, unchanged, with the host's pip
#    configuration (merged by host_pip_config.py) and the local paths it names mounted read-only
#    for the build's RUN steps only, so pip in the build reaches the packages the host's pip does
#    and the images keep nothing of it.
#
# Environment: STANDIN_BASE=1 makes the stand-in without trying a registry; DEBIAN_MIRROR picks
# the mirror (default: the host's apt sources); BUILD_ISOLATION the RUN steps' (default chroot);
# TORCH_INDEX overrides the Dockerfile's torch index (default: the Dockerfile's when it answers,
# else the host's pip index with its find-links).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '%s images: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
seconds_since() { echo $(($(date +%s) - $1)); }

[ $# -gt 0 ] || die "usage: $0 NAME=TAG... (NAME: a Dockerfile under images/, e.g. operator=kuberl-operator:dev)"
command -v podman >/dev/null || die "podman is missing (Debian: apt-get install podman)"

# The FROM every stage uses, as podman names it (python:3.11-slim -> docker.io/library/python:3.11-slim).
base_image() {
    local froms
    froms=$(for pair in "$@"; do sed -n 's/^FROM[[:space:]]\+\([^[:space:]]\+\).*/\1/p' "images/${pair%%=*}.Dockerfile"; done | sort -u)
    [ "$(wc -l <<<"$froms")" -eq 1 ] || die "the images start from more than one base: $froms"
    case "$froms" in
        */*/*) echo "$froms" ;;
        */*) echo "docker.io/$froms" ;;
        *) echo "docker.io/library/$froms" ;;
    esac
}

debian_mirror() {
    if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
    local uri
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | grep -oE '(URIs:|^deb)[[:space:]]+[^[:space:]]+/debian/?([[:space:]]|$)' | awk '{print $2}' | head -n1 || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

# python:3.11-slim is Python 3.11 in /usr/local/bin (python, python3, python3.11, pip, pip3) on a
# slim Debian with ca-certificates, PATH led by /usr/local/bin, LANG=C.UTF-8 and no
# EXTERNALLY-MANAGED marker. Debian bookworm's python3 is 3.11: link it where the images expect it.
make_standin() {
    local image=$1 rootfs mirror started
    command -v debootstrap >/dev/null || die "no registry answered for $image and debootstrap is missing (apt-get install debootstrap)"
    [ "$(id -u)" -eq 0 ] || die "making the stand-in base needs root (debootstrap and chroot)"
    mirror=$(debian_mirror)
    # Kept on failure (debootstrap may leave /proc mounted in it); removed once imported.
    rootfs=$(mktemp -d /var/tmp/kuberl-standin.XXXXXX)
    started=$(date +%s)
    log "making a stand-in for $image: debootstrap bookworm from $mirror"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
        bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
        || { tail -n 30 "$rootfs.log" >&2; die "debootstrap failed (tree left in $rootfs)"; }
    chroot "$rootfs" /bin/sh -ec '
        for name in python python3 python3.11; do ln -sf /usr/bin/python3.11 /usr/local/bin/$name; done
        for name in pip pip3 pip3.11; do ln -sf /usr/bin/pip3 /usr/local/bin/$name; done
        rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED
        apt-get clean
        rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/* /tmp/*'
    [ "$(chroot "$rootfs" /usr/local/bin/python -c 'import sys, venv, ensurepip; print(sys.version_info[:2])')" = "(3, 11)" ] \
        || die "the stand-in's python is not 3.11"
    tar -C "$rootfs" --numeric-owner -c . | podman import \
        --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        --change 'LABEL org.kuberl.stand-in="debootstrap --variant=minbase bookworm + Debian python3.11"' \
        - "$image" >/dev/null
    rm -rf "$rootfs" "$rootfs.log"
    log "stand-in $image made in $(seconds_since "$started")s"
}

ensure_base() {
    local image=$1
    if podman image exists "$image"; then
        local standin
        standin=$(podman image inspect --format '{{index .Labels "org.kuberl.stand-in"}}' "$image")
        log "base $image present${standin:+ (stand-in: $standin)}"
    elif [ "${STANDIN_BASE:-0}" != 1 ] && timeout 300 podman pull -q "$image" >/dev/null 2>&1; then
        log "base $image pulled"
    else
        make_standin "$image"
    fi
}

# The torch index the trainer Dockerfiles name may be out of reach (a machine that reaches only
# package registries); the host's pip then finds the same pinned torch through its own config.
torch_index_arg() {
    local default
    default=$(sed -n 's/^ARG TORCH_INDEX=//p' "$1")
    [ -n "$default" ] || return 0
    if [ -n "${TORCH_INDEX:-}" ]; then
        echo "--build-arg=TORCH_INDEX=$TORCH_INDEX"
    elif ! curl -fsS -o /dev/null --max-time 20 "$default/" 2>/dev/null; then
        local host_index
        host_index=$(sed -n 's/^index-url *= *//p' "$home/.config/pip/pip.conf" | head -n1)
        log "$default does not answer: torch comes from ${host_index:-https://pypi.org/simple} and the host's find-links"
        echo "--build-arg=TORCH_INDEX=${host_index:-https://pypi.org/simple}"
    fi
}

# RUN steps as chroots: an OCI runtime wants a cgroup per step, which a machine that delegates no
# cgroups (crun: "cgroups in hybrid mode not supported") cannot give. BUILD_ISOLATION=oci on others.
isolation=${BUILD_ISOLATION:-chroot}
base=$(base_image "$@")
ensure_base "$base"

# pip in the build finds the host's configuration as root's user config. The build's RUN steps get
# a scratch home mounted over /root, which every Debian base has, with the configuration and the
# local paths it names mounted inside it: the mount points then lie in the scratch directory on
# this machine, so no stage (the final one runs RUN steps too) gets an empty /etc/pip.conf or /opt/...
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
home=$work/root prefix=/root/.host-pip
mkdir -p "$home/.config/pip"
mounts=(--volume "$home:/root")
while IFS= read -r path; do
    [ -n "$path" ] || continue
    if [ -d "$path" ]; then
        mkdir -p "$home/.host-pip$path"
    else
        mkdir -p "$(dirname "$home/.host-pip$path")" && touch "$home/.host-pip$path"
    fi
    mounts+=(--volume "$path:$prefix$path:ro")
done < <(python3 images/host_pip_config.py "$home/.config/pip/pip.conf" "$prefix")
log "pip in the build: $(grep -c = "$home/.config/pip/pip.conf") settings from the host, mounts: ${mounts[*]}"

for pair in "$@"; do
    name=${pair%%=*} tag=${pair#*=}
    dockerfile=images/$name.Dockerfile
    [ -f "$dockerfile" ] && [ "$tag" != "$pair" ] || die "$pair: want NAME=TAG with images/NAME.Dockerfile"
    args=()
    index_arg=$(torch_index_arg "$dockerfile")
    [ -n "$index_arg" ] && args+=("$index_arg")
    started=$(date +%s)
    log "building $tag from $dockerfile"
    build_log=${TMPDIR:-/tmp}/kuberl-image-$name.log
    podman build --pull=never --network=host --isolation="$isolation" "${mounts[@]}" "${args[@]}" \
        -f "$dockerfile" -t "$tag" . >"$build_log" 2>&1 \
        || { tail -n 40 "$build_log" >&2; die "podman build of $dockerfile failed (log: $build_log)"; }
    log "built $tag in $(seconds_since "$started")s ($(podman image inspect --format '{{.Size}}' "$tag") bytes; log: $build_log)"
done
