#!/usr/bin/env bash
# The namespace lab's Debian packages (`dyncc lab`, `dyncc demo` as root, the lab tests).
#
#   lab.sh install   apt-get install what is missing (root): nginx-light (the edge web server),
#                    clang + libbpf-dev (to build the lab's tc BPF loss program and the agent's
#                    sock_ops program), bpftool (loads and attaches the sock_ops program),
#                    iproute2 (ip, tc)
#   lab.sh check     exit 0 when everything is there, else name what is missing
#
# apt_install_no_start (deploy/lib.sh) installs them with their dependencies only (no
# Recommends, no other package upgraded unless a dependency needs a newer version, logged),
# with service starts denied, and disables at boot whatever the install enabled: nginx's package
# would run a system-wide nginx on port 80 now and at every boot (nginx.service,
# /etc/init.d/nginx); the lab runs its own nginx inside each edge namespace.
set -euo pipefail
_dyncc_tag=lab
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

PACKAGES=(nginx-light clang libbpf-dev bpftool iproute2)
SERVICES=(nginx.service sysv:nginx)  # what the packages enable at boot (nginx-common)

missing() {
    local pkg out=()
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || out+=("$pkg")
    done
    echo "${out[@]:-}"
}

# warn_enabled: say so when nginx is enabled at boot (an install by dyncc before deploy/lib.sh
# disabled it, or by hand); it is left as it is: it may be the host's own web server.
warn_enabled() {
    local unit on=()
    for unit in $(enabled_at_boot); do
        [[ " ${SERVICES[*]} " == *" $unit "* ]] && on+=("$unit")
    done
    [[ ${#on[@]} == 0 ]] || log "note: enabled at boot: ${on[*]} (the lab does not need it: systemctl disable nginx)"
}

cmd_check() {
    local m
    m=$(missing)
    [[ -z $m ]] || die "missing Debian packages: $m (run: $0 install)"
    log "lab packages installed"
    warn_enabled
}

cmd_install() {
    local m
    m=$(missing)
    if [[ -z $m ]]; then
        log "lab packages installed"
        warn_enabled
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
