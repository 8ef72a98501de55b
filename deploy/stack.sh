#!/usr/bin/env bash
# dyncc test stack: ClickHouse (127.0.0.1:19000, http 18123) + Kafka (127.0.0.1:19092).
#
#   stack.sh up      install/fetch what is missing, start both servers in parallel, wait for both
#   stack.sh down    stop both
#   stack.sh status  show both (exit 0 only if both run)
#   stack.sh env     print the env exports the tests read:
#                      eval "$(bash deploy/stack.sh env)"
#
# State lives in ${DYNCC_STACK_DIR:-<repo>/.stack}; jars in ${DYNCC_CACHE:-~/.cache/dyncc}.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_dyncc_tag=stack
# shellcheck source=deploy/lib.sh
. "$HERE/lib.sh"

CH=$HERE/clickhouse/clickhouse.sh
KAFKA=$HERE/kafka/kafka.sh

# both CMD_A CMD_B: run two commands in parallel; fail if either fails.
both() {
    local a=$1 b=$2 pa pb ra=0 rb=0
    bash -c "$a" & pa=$!
    bash -c "$b" & pb=$!
    wait "$pa" || ra=$?
    wait "$pb" || rb=$?
    ((ra == 0 && rb == 0))
}

cmd_up() {
    local t0
    t0=$(now_ms)
    both "bash '$CH' install" "bash '$KAFKA' fetch" || die "install/fetch failed"
    # `start` also checks the ports; `wait` fails fast if a server died.
    if ! both "bash '$CH' start && bash '$CH' wait" "bash '$KAFKA' start && bash '$KAFKA' wait"; then
        die "stack did not come up (logs under $DYNCC_STACK_DIR); run: bash $0 down"
    fi
    log "up in $(($(now_ms) - t0)) ms"
    cmd_env >&2
}

cmd_down() {
    both "bash '$KAFKA' stop" "bash '$CH' stop"
}

cmd_status() {
    local rc=0
    bash "$CH" status || rc=$?
    bash "$KAFKA" status || rc=$?
    return "$rc"
}

cmd_env() {
    echo "export DYNCC_TEST_CLICKHOUSE=clickhouse://default:@127.0.0.1:${DYNCC_CH_TCP_PORT:-19000}/default"
    echo "export DYNCC_TEST_KAFKA=127.0.0.1:${DYNCC_KAFKA_PORT:-19092}"
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *) echo "usage: $0 {up|down|status|env}" >&2; exit 2 ;;
esac
