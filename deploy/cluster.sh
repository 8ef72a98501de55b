#!/usr/bin/env bash
# dyncc test cluster: ZooKeeper 3.8 (standalone, 127.0.0.1:19181) and four ClickHouse
# 18.16 servers forming cluster `dyncc`, 2 shards x 2 replicas, all on loopback:
#
#   node  shard  tcp    http   interserver
#   s1r1  01     19101  18201  19201
#   s1r2  01     19102  18202  19202
#   s2r1  02     19103  18203  19203
#   s2r2  02     19104  18204  19204
#
#   cluster.sh up               install/fetch what is missing, start ZooKeeper, then the four
#                               servers in parallel; wait for all and check the cluster
#                               (a no-op when everything already runs)
#   cluster.sh down             stop the four servers, then ZooKeeper
#   cluster.sh status           show all five (exit 0 only if all five run)
#   cluster.sh env              print the env export the tests read:
#                                 eval "$(bash deploy/cluster.sh env)"
#   cluster.sh stop-node NODE   stop one server (e.g. s2r1)
#   cluster.sh start-node NODE  start one server again and wait until it answers
#
# Env: DYNCC_ZK_PORT (19181); DYNCC_CLUSTER_TCP_PORT (19101), DYNCC_CLUSTER_HTTP_PORT (18201),
#      DYNCC_CLUSTER_INTERSERVER_PORT (19201): the ports of s1r1, the other nodes count up
#      from them in the order above; DYNCC_CLUSTER_WAIT_TIMEOUT (60 s), DYNCC_CH_STOP_TIMEOUT
#      (30 s), DYNCC_ZK_HEAP_OPTS (-Xms32m -Xmx256m), DYNCC_STACK_DIR (<repo>/.stack), DYNCC_CACHE.
# State lives in $DYNCC_STACK_DIR/cluster/{zookeeper,s1r1,s1r2,s2r1,s2r2} and survives
# down/up; remove that directory (after `down`) to start from empty servers.
# ZooKeeper runs from the jars `deploy/kafka/kafka.sh fetch` puts in
# ${DYNCC_CACHE:-~/.cache/dyncc}/kafka-3.9/libs.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_dyncc_tag=cluster
# shellcheck source=deploy/lib.sh
. "$HERE/lib.sh"

CH=$HERE/clickhouse/clickhouse.sh
KAFKA=$HERE/kafka/kafka.sh
TEMPLATES=$HERE/cluster

NODES=(s1r1 s1r2 s2r1 s2r2)
ZK_PORT=${DYNCC_ZK_PORT:-19181}
TCP_BASE=${DYNCC_CLUSTER_TCP_PORT:-19101}
HTTP_BASE=${DYNCC_CLUSTER_HTTP_PORT:-18201}
INTERSERVER_BASE=${DYNCC_CLUSTER_INTERSERVER_PORT:-19201}
WAIT_TIMEOUT=${DYNCC_CLUSTER_WAIT_TIMEOUT:-60}
CH_STOP_TIMEOUT=${DYNCC_CH_STOP_TIMEOUT:-30}
ZK_HEAP_OPTS=${DYNCC_ZK_HEAP_OPTS:--Xms32m -Xmx256m}

CDIR=$DYNCC_STACK_DIR/cluster
ZK_DIR=$CDIR/zookeeper
ZK_CONF=$ZK_DIR/zoo.cfg
ZK_PIDFILE=$ZK_DIR/zookeeper.pid
ZK_PATTERN=$ZK_CONF
LIBS=$DYNCC_CACHE/kafka-3.9/libs

# ---- nodes ------------------------------------------------------------------

# node_index NODE: position of NODE in NODES (0..3); dies on an unknown name.
node_index() {
    local i
    for i in "${!NODES[@]}"; do
        [[ ${NODES[$i]} == "$1" ]] && { echo "$i"; return 0; }
    done
    die "unknown node '$1' (one of: ${NODES[*]})"
}

tcp_port() { echo $((TCP_BASE + $(node_index "$1"))); }
http_port() { echo $((HTTP_BASE + $(node_index "$1"))); }
interserver_port() { echo $((INTERSERVER_BASE + $(node_index "$1"))); }
shard_of() { if (($(node_index "$1") < 2)); then echo 01; else echo 02; fi; }
node_dir() { echo "$CDIR/$1"; }
node_pidfile() { echo "$CDIR/$1/clickhouse-server.pid"; }
# The rendered config path is on the server's command line and unique per node.
node_pattern() { echo "$CDIR/$1/etc/config.xml"; }
node_alive() { pid_alive "$(node_pidfile "$1")" "$(node_pattern "$1")"; }

client() {
    local node=$1
    shift
    clickhouse-client --host 127.0.0.1 --port "$(tcp_port "$node")" "$@"
}

# check_free NAME PORT...: die if another process listens on one of the ports.
check_free() {
    local name=$1 p
    shift
    for p in "$@"; do
        port_open "$p" && die "$name: port $p is already in use by another process (set DYNCC_ZK_PORT / DYNCC_CLUSTER_TCP_PORT / DYNCC_CLUSTER_HTTP_PORT / DYNCC_CLUSTER_INTERSERVER_PORT)"
    done
    return 0
}

node_ports() { echo "$(tcp_port "$1") $(http_port "$1") $(interserver_port "$1")"; }

render_node() {
    local node=$1 dir etc
    dir=$(node_dir "$node")
    etc=$dir/etc
    mkdir -p "$etc" "$dir/data" "$dir/tmp" "$dir/log" "$dir/user_files" "$dir/format_schemas"
    sed -e "s|@NODE_DIR@|$dir|g" \
        -e "s|@NODE@|$node|g" \
        -e "s|@SHARD@|$(shard_of "$node")|g" \
        -e "s|@TCP_PORT@|$(tcp_port "$node")|g" \
        -e "s|@HTTP_PORT@|$(http_port "$node")|g" \
        -e "s|@INTERSERVER_PORT@|$(interserver_port "$node")|g" \
        -e "s|@ZK_PORT@|$ZK_PORT|g" \
        -e "s|@TCP_S1R1@|$(tcp_port s1r1)|g" \
        -e "s|@TCP_S1R2@|$(tcp_port s1r2)|g" \
        -e "s|@TCP_S2R1@|$(tcp_port s2r1)|g" \
        -e "s|@TCP_S2R2@|$(tcp_port s2r2)|g" \
        "$TEMPLATES/config.xml" >"$etc/config.xml.tmp"
    mv "$etc/config.xml.tmp" "$etc/config.xml"
    cp "$HERE/clickhouse/users.xml" "$etc/users.xml"
}

# start_node NODE: launch the server in the background (no wait); no-op when it runs.
start_node() {
    local node=$1 bin dir
    if node_alive "$node"; then
        log "$node already running (pid $(<"$(node_pidfile "$node")"), port $(tcp_port "$node"))"
        return 0
    fi
    bin=$(server_bin) || die "clickhouse-server not installed (run: bash $CH install)"
    # shellcheck disable=SC2046  # word splitting of the port list is intended
    check_free "$node" $(node_ports "$node")
    render_node "$node"
    dir=$(node_dir "$node")
    log "starting $node on 127.0.0.1:$(tcp_port "$node") (shard $(shard_of "$node")), data in $dir"
    # Run from the config dir: 18.16 writes preprocessed configs next to it.
    (cd "$dir/etc" && launch_bg "$(node_pidfile "$node")" "$dir/log/stdout.log" "$bin" --config-file="$dir/etc/config.xml")
}

# wait_node NODE: block until the server answers SELECT 1; fail fast if it died.
wait_node() {
    local node=$1 t0 deadline dir
    dir=$(node_dir "$node")
    t0=$(now_ms)
    deadline=$((t0 + WAIT_TIMEOUT * 1000))
    while :; do
        if client "$node" -q 'SELECT 1' >/dev/null 2>&1; then
            log "$node ready on 127.0.0.1:$(tcp_port "$node") after $(($(now_ms) - t0)) ms"
            return 0
        fi
        if ! node_alive "$node"; then
            tail -n 30 "$dir/log/clickhouse-server.err.log" "$dir/log/stdout.log" 2>/dev/null >&2 || true
            die "$node is not running (see $dir/log)"
        fi
        (($(now_ms) < deadline)) || die "$node did not answer on 127.0.0.1:$(tcp_port "$node") within ${WAIT_TIMEOUT}s (see $dir/log)"
        sleep 0.2
    done
}

stop_node() {
    stop_pid "$(node_pidfile "$1")" "$(node_pattern "$1")" "$1" "$CH_STOP_TIMEOUT"
}

# check_node NODE: the node sees cluster `dyncc` with 4 replicas and reaches ZooKeeper.
check_node() {
    local node=$1 n
    n=$(client "$node" -q "SELECT count() FROM system.clusters WHERE cluster = 'dyncc'") \
        || die "$node: cannot read system.clusters"
    [[ $n == 4 ]] || die "$node: system.clusters has $n rows for cluster dyncc, expected 4"
    client "$node" -q "SELECT count() FROM system.zookeeper WHERE path = '/'" >/dev/null \
        || die "$node: cannot read system.zookeeper (ZooKeeper on 127.0.0.1:$ZK_PORT)"
}

# ---- ZooKeeper ----------------------------------------------------------------

zk_alive() { pid_alive "$ZK_PIDFILE" "$ZK_PATTERN"; }

# zk_4lw WORD: send a four-letter word, print the answer (empty when nobody answers).
zk_4lw() {
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' \
        zk-4lw "$ZK_PORT" "$1" 2>/dev/null || true
}

zk_start() {
    if zk_alive; then
        log "zookeeper already running (pid $(<"$ZK_PIDFILE"), port $ZK_PORT)"
        return 0
    fi
    command -v java >/dev/null || die "java not found (Java 17 needed for ZooKeeper)"
    compgen -G "$LIBS/zookeeper-3.8.*.jar" >/dev/null \
        || die "ZooKeeper jars missing in $LIBS (run: bash $KAFKA fetch)"
    check_free zookeeper "$ZK_PORT"
    mkdir -p "$ZK_DIR/data" "$ZK_DIR/log"
    sed -e "s|@ZK_DIR@|$ZK_DIR|g" -e "s|@ZK_PORT@|$ZK_PORT|g" "$TEMPLATES/zoo.cfg" >"$ZK_CONF.tmp"
    mv "$ZK_CONF.tmp" "$ZK_CONF"
    local heap
    read -r -a heap <<<"$ZK_HEAP_OPTS"
    log "starting zookeeper on 127.0.0.1:$ZK_PORT, data in $ZK_DIR"
    launch_bg "$ZK_PIDFILE" "$ZK_DIR/log/zookeeper.out" \
        java "${heap[@]}" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
        "-Dzookeeper.log.dir=$ZK_DIR/log" "-Dlog4j.configuration=file:$TEMPLATES/log4j.properties" \
        -Dzookeeper.jmx.log4j.disable=true \
        -cp "$LIBS/*" org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZK_CONF"
}

# zk_wait: block until `srvr` reports a serving standalone server.
zk_wait() {
    local t0 deadline
    t0=$(now_ms)
    deadline=$((t0 + WAIT_TIMEOUT * 1000))
    while :; do
        if [[ $(zk_4lw srvr) == *"Mode: standalone"* ]]; then
            log "zookeeper ready on 127.0.0.1:$ZK_PORT after $(($(now_ms) - t0)) ms"
            return 0
        fi
        if ! zk_alive; then
            tail -n 30 "$ZK_DIR/log/zookeeper.log" "$ZK_DIR/log/zookeeper.out" 2>/dev/null >&2 || true
            die "zookeeper is not running (see $ZK_DIR/log)"
        fi
        (($(now_ms) < deadline)) || die "zookeeper did not answer on 127.0.0.1:$ZK_PORT within ${WAIT_TIMEOUT}s (see $ZK_DIR/log)"
        sleep 0.1
    done
}

zk_stop() {
    stop_pid "$ZK_PIDFILE" "$ZK_PATTERN" zookeeper 30
}

# ---- commands -------------------------------------------------------------------

# parallel WHAT FUNC ARG...: run `FUNC ARG` for every ARG in parallel; when one fails, die
# with message WHAT (or just return 1 when WHAT is empty). Call it as a plain command, not
# under `||`/`if`: that would switch off `set -e` inside FUNC.
parallel() {
    local what=$1 fn=$2 arg pid rc=0 pids=()
    shift 2
    for arg in "$@"; do
        "$fn" "$arg" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || rc=1
    done
    if ((rc != 0)); then
        [[ -n $what ]] && die "$what"
        return 1
    fi
}

_up_started=()
_up_done=0

# On a failed `up`, stop what this `up` started (what already ran stays).
_up_cleanup() {
    [[ $_up_done == 1 || $BASHPID != "$$" ]] && return 0
    local x nodes=() zk=0
    for x in "${_up_started[@]}"; do
        if [[ $x == zookeeper ]]; then zk=1; else nodes+=("$x"); fi
    done
    if ((${#nodes[@]} > 0)); then parallel "" stop_node "${nodes[@]}" || true; fi
    if ((zk == 1)); then zk_stop; fi
}

cmd_up() {
    local t0 node to_start=()
    t0=$(now_ms)
    if ! server_bin >/dev/null || ! command -v clickhouse-client >/dev/null \
        || ! compgen -G "$LIBS/zookeeper-3.8.*.jar" >/dev/null; then
        local pa pb ra=0 rb=0
        bash "$CH" install & pa=$!
        bash "$KAFKA" fetch & pb=$!
        wait "$pa" || ra=$?
        wait "$pb" || rb=$?
        ((ra == 0 && rb == 0)) || die "install/fetch failed"
    fi
    # Fail fast, before starting anything, when a port is taken by a stranger.
    zk_alive || check_free zookeeper "$ZK_PORT"
    for node in "${NODES[@]}"; do
        if ! node_alive "$node"; then
            # shellcheck disable=SC2046
            check_free "$node" $(node_ports "$node")
            to_start+=("$node")
        fi
    done
    trap _up_cleanup EXIT
    if ! zk_alive; then
        _up_started+=(zookeeper)
        zk_start
    fi
    zk_wait
    # The servers start after ZooKeeper answers: a replicated table that finds no
    # ZooKeeper at start-up stays read-only until its session retries.
    _up_started+=("${to_start[@]}")
    parallel "a server did not start; logs under $CDIR" start_node "${to_start[@]}"
    parallel "the cluster did not come up; logs under $CDIR" wait_node "${NODES[@]}"
    parallel "cluster check failed" check_node "${NODES[@]}"
    _up_done=1
    log "up in $(($(now_ms) - t0)) ms"
    cmd_env >&2
}

cmd_down() {
    local rc=0
    parallel "" stop_node "${NODES[@]}" || rc=$?
    zk_stop
    return "$rc"
}

cmd_status() {
    local rc=0 node
    if zk_alive; then
        echo "zookeeper: running (pid $(<"$ZK_PIDFILE"), 127.0.0.1:$ZK_PORT, data $ZK_DIR)"
    else
        echo "zookeeper: stopped"
        rc=3
    fi
    for node in "${NODES[@]}"; do
        if node_alive "$node"; then
            echo "$node: running (pid $(<"$(node_pidfile "$node")"), shard $(shard_of "$node"), 127.0.0.1:$(tcp_port "$node") http $(http_port "$node"), data $(node_dir "$node"))"
        else
            echo "$node: stopped"
            rc=3
        fi
    done
    return "$rc"
}

cmd_env() {
    echo "export DYNCC_TEST_CLUSTER=clickhouse://default:@127.0.0.1:$(tcp_port s1r1)/default?cluster=dyncc"
}

cmd_stop_node() {
    node_index "$1" >/dev/null
    stop_node "$1"
}

cmd_start_node() {
    node_index "$1" >/dev/null
    zk_alive || die "zookeeper is not running (run: bash $0 up)"
    start_node "$1"
    wait_node "$1"
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    stop-node) [[ $# == 2 ]] || die "usage: $0 stop-node NODE"; cmd_stop_node "$2" ;;
    start-node) [[ $# == 2 ]] || die "usage: $0 start-node NODE"; cmd_start_node "$2" ;;
    *) echo "usage: $0 {up|down|status|env|stop-node NODE|start-node NODE}" >&2; exit 2 ;;
esac
