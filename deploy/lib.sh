# Shared helpers for deploy/*.sh (sourced, not executed).
# shellcheck shell=bash

DYNCC_REPO=${DYNCC_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
DYNCC_STACK_DIR=${DYNCC_STACK_DIR:-$DYNCC_REPO/.stack}
DYNCC_CACHE=${DYNCC_CACHE:-${HOME:-/root}/.cache/dyncc}

_dyncc_tag=${_dyncc_tag:-stack}
log() { printf '[%s] %s\n' "$_dyncc_tag" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$_dyncc_tag" "$*" >&2; exit 1; }

# now_ms: wall clock in milliseconds.
now_ms() { date +%s%3N; }

# pid_alive PIDFILE PATTERN: true if the pid in PIDFILE runs and its command
# line contains PATTERN (guards against pid reuse after a reboot/crash).
pid_alive() {
    local pidfile=$1 pattern=$2 pid
    [[ -s $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$pattern"
}

# launch_bg PIDFILE OUTFILE CMD...: start CMD detached (own session, no tty,
# stdin from /dev/null), write its real pid to PIDFILE.
launch_bg() {
    local pidfile=$1 outfile=$2
    shift 2
    rm -f "$pidfile"
    # shellcheck disable=SC2016  # $$/$1/$@ belong to the inner shell
    if command -v setsid >/dev/null 2>&1; then
        setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' dyncc-launch "$pidfile" "$@" \
            </dev/null >>"$outfile" 2>&1 &
    else
        nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' dyncc-launch "$pidfile" "$@" \
            </dev/null >>"$outfile" 2>&1 &
    fi
    local i
    for i in $(seq 1 50); do
        [[ -s $pidfile ]] && return 0
        sleep 0.1
    done
    die "process did not write its pid file $pidfile"
}

# stop_pid PIDFILE PATTERN NAME [TIMEOUT_S]: SIGTERM, wait, then SIGKILL.
stop_pid() {
    local pidfile=$1 pattern=$2 name=$3 timeout=${4:-30} pid i
    if ! pid_alive "$pidfile" "$pattern"; then
        rm -f "$pidfile"
        log "$name not running"
        return 0
    fi
    pid=$(<"$pidfile")
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name did not exit after ${timeout}s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    rm -f "$pidfile"
    log "$name stopped"
}

# port_open PORT [HOST]: true if something accepts TCP connections there.
port_open() {
    local port=$1 host=${2:-127.0.0.1}
    (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}

# server_bin: the clickhouse-server binary (PATH, then Debian's locations); fails if none.
server_bin() {
    local b
    for b in "$(command -v clickhouse-server 2>/dev/null || true)" /usr/sbin/clickhouse-server /usr/bin/clickhouse-server; do
        [[ -n $b && -x $b ]] && { echo "$b"; return 0; }
    done
    return 1
}

# apt_install_no_start PKG...: apt-get install exactly PKGs and what they depend on, changing
# nothing else, and leave no service of theirs running or enabled: dyncc runs its own instances
# (clickhouse-server, nginx) and the system-wide ones must not start, now or at boot.
#   - no Recommends, no upgrade of an installed package named in PKGs (--no-upgrade), and no
#     upgrade of installed packages only because they come from the same source package as one
#     being installed (apt >= 2.5.2 does that by default: installing bpftool upgraded linux-perf
#     and linux-libc-dev).  An installed dependency is upgraded only when a package being
#     installed needs a newer version; the plan, with those upgrades, is logged first.
#   - a policy-rc.d that denies every service start for the length of the install (an existing
#     one that would allow starts is set aside and put back);
#   - then every unit or SysV service the install enabled at boot is disabled again (and stopped,
#     when systemd runs): a package's postinst enables its service (deb-systemd-helper enable,
#     update-rc.d defaults) whatever policy-rc.d says.  What was enabled before is left alone.
# `apt-get update` first when the install fails on an old package list.
APT_INSTALL_OPTS=(-y -q --no-install-recommends --no-upgrade -o APT::Get::Upgrade-By-Source-Package=false)
POLICY_RC=/usr/sbin/policy-rc.d
POLICY_MARK='# dyncc: apt_install_no_start (deploy/lib.sh) denies service starts during its install'

apt_install_no_start() {
    local rc=0 before
    export DEBIAN_FRONTEND=noninteractive
    before=$(mktemp)
    enabled_at_boot >"$before"
    deny_service_starts
    apt_plan "$@"
    apt-get install "${APT_INSTALL_OPTS[@]}" "$@" \
        || { apt-get update -q && apt-get install "${APT_INSTALL_OPTS[@]}" "$@"; } || rc=$?
    allow_service_starts
    disable_new_at_boot "$before" || { [[ $rc != 0 ]] || rc=1; }
    rm -f "$before"
    return "$rc"
}

# apt_plan PKG...: log what apt-get would install and which installed packages it would upgrade.
apt_plan() {
    local sim new upgraded
    sim=$(apt-get install -s "${APT_INSTALL_OPTS[@]}" "$@" 2>/dev/null) || return 0
    new=$(awk '$1 == "Inst" && $3 !~ /^\[/ {print $2}' <<<"$sim" | paste -sd' ' -)
    upgraded=$(awk '$1 == "Inst" && $3 ~ /^\[/ {gsub(/[][]/, "", $3); gsub(/\(/, "", $4); print $2 " (" $3 " -> " $4 ")"}' <<<"$sim" \
        | paste -sd, - | sed 's/,/, /g')
    [[ -z $new ]] || log "apt-get installs: $new"
    [[ -z $upgraded ]] || log "apt-get also upgrades (a package being installed needs the newer version): $upgraded"
}

# deny_service_starts / allow_service_starts: a policy-rc.d that answers 101 (action forbidden)
# to invoke-rc.d and deb-systemd-invoke while apt-get runs.  A leftover of an interrupted run is
# recognised by its mark; an existing policy that already denies is kept as it is.
deny_service_starts() {
    if [[ -e $POLICY_RC.dyncc-saved ]]; then  # an interrupted run: put the original back first
        mv -f "$POLICY_RC.dyncc-saved" "$POLICY_RC"
    fi
    if [[ -e $POLICY_RC ]] && ! grep -qF "$POLICY_MARK" "$POLICY_RC"; then
        local probe=0
        "$POLICY_RC" dyncc-probe start >/dev/null 2>&1 || probe=$?
        [[ $probe == 101 ]] && return 0
        mv -f "$POLICY_RC" "$POLICY_RC.dyncc-saved"
    fi
    printf '#!/bin/sh\n%s\nexit 101\n' "$POLICY_MARK" >"$POLICY_RC"
    chmod 755 "$POLICY_RC"
}

allow_service_starts() {
    if [[ -e $POLICY_RC ]] && grep -qF "$POLICY_MARK" "$POLICY_RC"; then
        rm -f "$POLICY_RC"
    fi
    if [[ -e $POLICY_RC.dyncc-saved ]]; then
        mv -f "$POLICY_RC.dyncc-saved" "$POLICY_RC"
    fi
}

# enabled_at_boot: what starts at boot, one sorted line each: the units linked in the .wants and
# .requires directories under $DYNCC_SYSROOT/etc/systemd/system, and the SysV services with an
# S link in /etc/rc{S,2,3,4,5}.d (as sysv:NAME).  DYNCC_SYSROOT (default /) is for tests.
enabled_at_boot() {
    local etc=${DYNCC_SYSROOT:-}/etc
    (
        shopt -s nullglob
        local f name
        for f in "$etc"/systemd/system/*.wants/* "$etc"/systemd/system/*.requires/*; do
            echo "${f##*/}"
        done
        for f in "$etc"/rc[S2-5].d/S[0-9][0-9]*; do
            name=${f##*/}
            echo "sysv:${name:3}"
        done
    ) | LC_ALL=C sort -u
}

# disable_new_at_boot FILE: disable (systemctl disable, --now when systemd runs; update-rc.d for
# SysV links left) what is enabled at boot now but not in FILE (an enabled_at_boot list).
# Fails when something new is still enabled afterwards.
disable_new_at_boot() {
    local before=$1 unit new root=${DYNCC_SYSROOT:-} now=()
    [[ -z $root && -d /run/systemd/system ]] && now=(--now)
    new=$(LC_ALL=C comm -13 "$before" <(enabled_at_boot))
    for unit in $new; do
        [[ $unit == sysv:* ]] && continue
        log "disabling $unit: its package enabled it at boot (dyncc runs its own instances)"
        if command -v systemctl >/dev/null 2>&1; then
            systemctl ${root:+--root="$root"} disable "${now[@]}" --quiet "$unit" || true
        fi
    done
    new=$(LC_ALL=C comm -13 "$before" <(enabled_at_boot))
    for unit in $new; do
        [[ $unit == sysv:* && -z $root ]] || continue
        log "disabling SysV service ${unit#sysv:}: its package enabled it at boot"
        update-rc.d "${unit#sysv:}" disable >/dev/null 2>&1 || true
    done
    new=$(LC_ALL=C comm -13 "$before" <(enabled_at_boot))
    if [[ -n $new ]]; then
        log "still enabled at boot after the install: $(tr '\n' ' ' <<<"$new")"
        return 1
    fi
}
