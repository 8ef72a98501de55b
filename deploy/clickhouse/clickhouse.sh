#!/usr/bin/env bash
# dyncc test ClickHouse server (Debian's clickhouse-server 18.16) on loopback.
#
#   clickhouse.sh install  apt-get install clickhouse-server clickhouse-client if missing
#   clickhouse.sh start    render config into the stack dir, start the server in the background
#   clickhouse.sh wait     block until `SELECT version()` answers (DYNCC_CH_WAIT_TIMEOUT, 60 s)
#   clickhouse.sh stop     SIGTERM, wait, SIGKILL
#   clickhouse.sh status   exit 0 when running
#
# Env: DYNCC_CH_TCP_PORT (19000), DYNCC_CH_HTTP_PORT (18123),
#      DYNCC_CH_INTERSERVER_PORT (19009), DYNCC_STACK_DIR (<repo>/.stack).
# Opt-in (unset: the plain loopback server above, user `default` without a password):
#      DYNCC_CH_TLS_PORT        also serve the native protocol over TLS on this port
#                               (tcp_port_secure); the certificate is made by openssl
#                               (tls-certs.sh): the CA clients trust is <stack>/clickhouse/tls/ca.crt
#      DYNCC_CH_PASSWORD_FILE   user `default` needs the password in this file (one line;
#                               users.xml gets its password_sha256_hex, never the password)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_dyncc_tag=clickhouse
# shellcheck source=deploy/lib.sh
. "$HERE/../lib.sh"

TCP_PORT=${DYNCC_CH_TCP_PORT:-19000}
HTTP_PORT=${DYNCC_CH_HTTP_PORT:-18123}
INTERSERVER_PORT=${DYNCC_CH_INTERSERVER_PORT:-19009}
CH_DIR=$DYNCC_STACK_DIR/clickhouse
ETC=$CH_DIR/etc
PIDFILE=$CH_DIR/clickhouse-server.pid
PATTERN=clickhouse-server
WAIT_TIMEOUT=${DYNCC_CH_WAIT_TIMEOUT:-60}
TLS_PORT=${DYNCC_CH_TLS_PORT:-}
PASSWORD_FILE=${DYNCC_CH_PASSWORD_FILE:-}
TLS_DIR=$CH_DIR/tls

client() {
    # the password, when there is one, from a client config file (never on the command line)
    if [[ -n $PASSWORD_FILE ]]; then
        clickhouse-client --config-file "$ETC/client.xml" --host 127.0.0.1 --port "$TCP_PORT" "$@"
    else
        clickhouse-client --host 127.0.0.1 --port "$TCP_PORT" "$@"
    fi
}

cmd_install() {
    if server_bin >/dev/null && command -v clickhouse-client >/dev/null; then
        log "installed: $(dpkg-query -W -f='${Version}' clickhouse-server 2>/dev/null || echo '?')"
        return 0
    fi
    [[ $(id -u) == 0 ]] || die "clickhouse-server is missing; installing it needs root (apt-get)"
    log "installing clickhouse-server clickhouse-client with apt-get"
    # the package's init script must not start the system-wide service (port 9000)
    apt-get update -q
    apt_install_no_start clickhouse-server clickhouse-client
    server_bin >/dev/null || die "clickhouse-server binary not found after install"
    log "installed: $(dpkg-query -W -f='${Version}' clickhouse-server)"
}

render_conf() {
    mkdir -p "$ETC" "$CH_DIR/data" "$CH_DIR/tmp" "$CH_DIR/log" "$CH_DIR/user_files" "$CH_DIR/format_schemas"
    sed -e "s|@CH_DIR@|$CH_DIR|g" \
        -e "s|@TCP_PORT@|$TCP_PORT|g" \
        -e "s|@HTTP_PORT@|$HTTP_PORT|g" \
        -e "s|@INTERSERVER_PORT@|$INTERSERVER_PORT|g" \
        "$HERE/config.xml" >"$ETC/config.xml.tmp"
    mv "$ETC/config.xml.tmp" "$ETC/config.xml"
    rm -f "$ETC/config.d/tls.xml" "$ETC/client.xml"
    if [[ -n $TLS_PORT ]]; then
        bash "$HERE/tls-certs.sh" "$TLS_DIR"
        mkdir -p "$ETC/config.d"
        sed -e "s|@TLS_PORT@|$TLS_PORT|g" -e "s|@TLS_DIR@|$TLS_DIR|g" "$HERE/tls.xml" >"$ETC/config.d/tls.xml"
    fi
    if [[ -n $PASSWORD_FILE ]]; then
        local password hash
        [[ -r $PASSWORD_FILE ]] || die "DYNCC_CH_PASSWORD_FILE $PASSWORD_FILE is not a readable file"
        password=$(<"$PASSWORD_FILE")
        [[ -n $password ]] || die "DYNCC_CH_PASSWORD_FILE $PASSWORD_FILE is empty"
        hash=$(printf '%s' "$password" | sha256sum | cut -d' ' -f1)
        sed -e "s|<password></password>|<password_sha256_hex>$hash</password_sha256_hex>|" \
            "$HERE/users.xml" >"$ETC/users.xml"
        (
            umask 077
            printf '<config>\n    <user>default</user>\n    <password>%s</password>\n</config>\n' \
                "$(printf '%s' "$password" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g')" \
                >"$ETC/client.xml"
        )
    else
        cp "$HERE/users.xml" "$ETC/users.xml"
    fi
}

cmd_start() {
    if pid_alive "$PIDFILE" "$PATTERN"; then
        log "already running (pid $(<"$PIDFILE"), port $TCP_PORT)"
        return 0
    fi
    local bin p
    bin=$(server_bin) || die "clickhouse-server not installed (run: $0 install)"
    for p in "$TCP_PORT" "$HTTP_PORT" "$INTERSERVER_PORT" $TLS_PORT; do
        port_open "$p" && die "port $p is already in use by another process (set DYNCC_CH_TCP_PORT / DYNCC_CH_HTTP_PORT / DYNCC_CH_INTERSERVER_PORT / DYNCC_CH_TLS_PORT)"
    done
    render_conf
    log "starting $bin on 127.0.0.1:$TCP_PORT (http $HTTP_PORT${TLS_PORT:+, TLS $TLS_PORT}${PASSWORD_FILE:+, password}), data in $CH_DIR"
    # Run from the config dir: 18.16 writes preprocessed configs next to it.
    (cd "$ETC" && launch_bg "$PIDFILE" "$CH_DIR/log/stdout.log" "$bin" --config-file="$ETC/config.xml")
}

cmd_wait() {
    local t0 deadline out
    t0=$(now_ms)
    deadline=$((t0 + WAIT_TIMEOUT * 1000))
    command -v clickhouse-client >/dev/null || die "clickhouse-client not installed (run: $0 install)"
    while :; do
        if out=$(client -q 'SELECT version()' 2>/dev/null); then
            log "ready on 127.0.0.1:$TCP_PORT (version $out) after $(($(now_ms) - t0)) ms"
            return 0
        fi
        if ! pid_alive "$PIDFILE" "$PATTERN"; then
            tail -n 30 "$CH_DIR/log/clickhouse-server.err.log" "$CH_DIR/log/stdout.log" 2>/dev/null >&2 || true
            die "server is not running (see $CH_DIR/log)"
        fi
        (($(now_ms) < deadline)) || die "server did not answer on 127.0.0.1:$TCP_PORT within ${WAIT_TIMEOUT}s (see $CH_DIR/log)"
        sleep 0.2
    done
}

cmd_stop() {
    stop_pid "$PIDFILE" "$PATTERN" "server" "${DYNCC_CH_STOP_TIMEOUT:-30}"
}

cmd_status() {
    if pid_alive "$PIDFILE" "$PATTERN"; then
        echo "clickhouse: running (pid $(<"$PIDFILE"), 127.0.0.1:$TCP_PORT, data $CH_DIR)"
    else
        echo "clickhouse: stopped"
        return 3
    fi
}

case ${1:-} in
    install) cmd_install ;;
    start) cmd_start ;;
    wait) cmd_wait ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    restart) cmd_stop; cmd_start; cmd_wait ;;
    *) echo "usage: $0 {install|start|wait|stop|status|restart}" >&2; exit 2 ;;
esac
