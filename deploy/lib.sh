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

# apt_install_no_start PKG...: apt-get install PKGs with a policy-rc.d in place (when none is),
# so that packages shipping a service (clickhouse-server, nginx) do not start the system-wide
# one: dyncc runs its own instances.  `apt-get update` first when the install fails on an old list.
apt_install_no_start() {
    local policy=/usr/sbin/policy-rc.d added=0 rc=0
    export DEBIAN_FRONTEND=noninteractive
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        added=1
    fi
    apt-get install -y -q --no-install-recommends "$@" \
        || { apt-get update -q && apt-get install -y -q --no-install-recommends "$@"; } || rc=$?
    if [[ $added == 1 ]]; then rm -f "$policy"; fi
    return "$rc"
}
