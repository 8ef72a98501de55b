#!/usr/bin/env bash
# Prometheus for dyncc's alerting rules (deploy/prometheus/dyncc-alerts.yml, docs/alerts.md).
#
#   prometheus.sh install                    Debian's `prometheus` package (ships promtool), with
#                                            its service neither started nor enabled at boot
#   prometheus.sh check                      exit 0 when prometheus and promtool are there
#   prometheus.sh rules                      promtool check rules + promtool test rules on the
#                                            rules of this directory
#   prometheus.sh run CONFIG DATADIR PORT    a Prometheus in the foreground on 127.0.0.1:PORT
#                                            (CONFIG: e.g. prometheus.yml here; DATADIR: its TSDB)
#
# apt_install_no_start (deploy/lib.sh) installs the package with its dependencies only and keeps
# prometheus.service (and the SysV script) from starting now or at boot: the package's own
# instance would scrape localhost:9090 and keep a TSDB under /var/lib/prometheus; dyncc runs
# Prometheus only where it needs one (tests/deploy/test_alerts.py, or an operator's own setup).
set -euo pipefail
_dyncc_tag=prometheus
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PACKAGES=(prometheus)

# bin NAME: the prometheus or promtool binary (PATH, then Debian's /usr/bin); fails if none.
bin() {
    local b
    for b in "$(command -v "$1" 2>/dev/null || true)" "/usr/bin/$1"; do
        [[ -n $b && -x $b ]] && { echo "$b"; return 0; }
    done
    return 1
}

missing() {
    local pkg out=()
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || out+=("$pkg")
    done
    echo "${out[@]:-}"
}

cmd_check() {
    bin prometheus >/dev/null || die "prometheus is not installed (run: $0 install)"
    bin promtool >/dev/null || die "promtool is not installed (run: $0 install)"
    log "prometheus and promtool installed ($("$(bin prometheus)" --version 2>&1 | head -n1))"
}

cmd_install() {
    local m
    m=$(missing)
    if [[ -z $m ]] && bin promtool >/dev/null; then
        log "prometheus installed"
        return 0
    fi
    [[ $(id -u) == 0 ]] || die "missing $m; installing needs root (apt-get)"
    log "installing $m with apt-get"
    # shellcheck disable=SC2086
    apt_install_no_start $m
    m=$(missing)
    [[ -z $m ]] || die "still missing after apt-get: $m"
    cmd_check
}

cmd_rules() {
    local promtool
    promtool=$(bin promtool) || die "promtool is not installed (run: $0 install)"
    "$promtool" check rules "$HERE/dyncc-alerts.yml"
    (cd "$HERE" && "$promtool" test rules dyncc-alerts.test.yml)
}

# run CONFIG DATADIR PORT: exec Prometheus on 127.0.0.1:PORT (SIGTERM stops it).  The web UI's
# assets of Debian's package are not needed: the HTTP API (/api/v1/...) is what tests use.
cmd_run() {
    [[ $# == 3 ]] || die "usage: $0 run CONFIG DATADIR PORT"
    local config=$1 data=$2 port=$3 prom
    prom=$(bin prometheus) || die "prometheus is not installed (run: $0 install)"
    [[ -f $config ]] || die "no such config: $config"
    [[ $port =~ ^[0-9]+$ ]] || die "bad port: $port"
    mkdir -p "$data"
    exec "$prom" \
        --config.file="$config" \
        --storage.tsdb.path="$data" \
        --web.listen-address="127.0.0.1:$port" \
        --web.enable-lifecycle \
        --log.level=warn
}

case ${1:-} in
    install) cmd_install ;;
    check) cmd_check ;;
    rules) cmd_rules ;;
    run) shift; cmd_run "$@" ;;
    *) echo "usage: $0 {install|check|rules|run CONFIG DATADIR PORT}" >&2; exit 2 ;;
esac
