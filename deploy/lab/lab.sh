#!/usr/bin/env bash
# The namespace lab's Debian packages (`dyncc lab`, `dyncc demo` as root, the lab tests).
#
#   lab.sh install   apt-get install what is missing: nginx-light (the edge web server),
#                    clang + llvm + libbpf-dev (the lab's tc BPF loss program), bpftool, iproute2
#   lab.sh check     exit 0 when everything is there, else name what is missing
#
# nginx's package would start a system-wide nginx on port 80: a policy-rc.d keeps it from
# starting (the lab runs its own nginx inside each edge namespace).
set -euo pipefail
_dyncc_tag=lab
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

PACKAGES=(nginx-light clang llvm libbpf-dev bpftool iproute2)

missing() {
    local pkg out=()
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || out+=("$pkg")
    done
    echo "${out[@]:-}"
}

cmd_check() {
    local m
    m=$(missing)
    [[ -z $m ]] || die "missing Debian packages: $m (run: $0 install)"
    log "lab packages installed"
}

cmd_install() {
    local m
    m=$(missing)
    if [[ -z $m ]]; then
        log "lab packages installed"
        return 0
    fi
    [[ $(id -u) == 0 ]] || die "missing $m; installing needs root (apt-get)"
    log "installing $m with apt-get"
    # shellcheck disable=SC2086
    apt_install_no_start $m
    m=$(missing)
    [[ -z $m ]] || die "still missing after apt-get: $m"
    log "lab packages installed"
}

case ${1:-} in
    install) cmd_install ;;
    check) cmd_check ;;
    *) echo "usage: $0 {install|check}" >&2; exit 2 ;;
esac
