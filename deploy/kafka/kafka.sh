#!/usr/bin/env bash
# dyncc test Kafka broker (single-node KRaft, Apache Kafka 3.9 from Maven Central).
#
#   kafka.sh fetch   download broker jars via Maven into
#                    ${DYNCC_CACHE:-$HOME/.cache/dyncc}/kafka-3.9/libs (skipped when cached)
#   kafka.sh start   render config, format storage once, start broker in the background
#   kafka.sh wait    block until the broker answers a metadata request (DYNCC_KAFKA_WAIT_TIMEOUT, 90 s)
#   kafka.sh stop    SIGTERM, wait, SIGKILL
#   kafka.sh status  exit 0 when running
#   kafka.sh acls    apply DYNCC_KAFKA_ACLS's roles (deploy/kafka/acls.py; `wait` does it too)
#
# Env: DYNCC_KAFKA_PORT (19092), DYNCC_KAFKA_CONTROLLER_PORT (19093),
#      DYNCC_STACK_DIR (<repo>/.stack), DYNCC_CACHE, DYNCC_KAFKA_HEAP_OPTS,
#      DYNCC_PYTHON (python with confluent_kafka for `wait`; default <repo>/.venv/bin/python),
#      DYNCC_MAVEN_ARGS (extra mvn args, e.g. -Dmaven.repo.local=...).
# TLS (opt-in, docs/security.md): DYNCC_KAFKA_TLS_PORT adds a SASL_SSL listener (TLS +
#      SCRAM-SHA-512) beside the plaintext one; DYNCC_KAFKA_MTLS_PORT an SSL listener that
#      requires a client certificate.  DYNCC_KAFKA_TLS_DIR (<stack>/kafka/tls): the
#      certificates, made by deploy/tls/make-certs.sh when missing; DYNCC_KAFKA_SCRAM_USERS
#      (<tls dir>/scram-users): "name:password" lines (letters, digits, '-', '_'), created with
#      one user "dyncc" and a random password when missing; the users are added when the
#      storage is formatted (kafka.tools.StorageTool --add-scram), i.e. on the first start.
# ACLs (opt-in, with a TLS port; docs/security.md "Kafka ACLs"): DYNCC_KAFKA_ACLS=FILE (e.g.
#      deploy/kafka/acl-roles) turns on KRaft's StandardAuthorizer (what no ACL allows is denied;
#      super user: User:ANONYMOUS, i.e. the loopback plaintext and controller listeners, the
#      admin and inter-broker ones), maps a client certificate to User:<CN>, and `wait` (also
#      `kafka.sh acls`) applies the FILE's roles with deploy/kafka/acls.py over the plaintext port.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_dyncc_tag=kafka
# shellcheck source=deploy/lib.sh
. "$HERE/../lib.sh"

PORT=${DYNCC_KAFKA_PORT:-19092}
CONTROLLER_PORT=${DYNCC_KAFKA_CONTROLLER_PORT:-19093}
KDIR=$DYNCC_STACK_DIR/kafka
DATA_DIR=$KDIR/data
LOG_DIR=$KDIR/logs
PIDFILE=$KDIR/kafka.pid
CONF=$KDIR/server.properties
LIBS=$DYNCC_CACHE/kafka-3.9/libs
STAMP=$LIBS/.dyncc-fetched
PATTERN=kafka.Kafka
HEAP_OPTS=${DYNCC_KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}
WAIT_TIMEOUT=${DYNCC_KAFKA_WAIT_TIMEOUT:-90}
TLS_PORT=${DYNCC_KAFKA_TLS_PORT:-}
MTLS_PORT=${DYNCC_KAFKA_MTLS_PORT:-}
TLS_DIR=${DYNCC_KAFKA_TLS_DIR:-$KDIR/tls}
SCRAM_USERS=${DYNCC_KAFKA_SCRAM_USERS:-$TLS_DIR/scram-users}
ACLS=${DYNCC_KAFKA_ACLS:-}

pom_sum() { sha256sum "$HERE/pom.xml" | cut -d' ' -f1; }

fetched() { [[ -f $STAMP && "$(<"$STAMP")" == "$(pom_sum)" ]]; }

cmd_fetch() {
    if fetched; then
        log "jars cached in $LIBS"
        return 0
    fi
    command -v mvn >/dev/null || die "mvn not found (Maven 3.8+ needed to fetch Kafka jars)"
    command -v java >/dev/null || die "java not found (Java 17 needed)"
    local tmp=$LIBS.tmp.$$ t0
    t0=$(now_ms)
    log "fetching Kafka jars with Maven into $LIBS"
    rm -rf "$tmp"
    mkdir -p "$(dirname "$LIBS")"
    local mvnlog=$DYNCC_CACHE/kafka-3.9/mvn.log
    # shellcheck disable=SC2086
    if ! mvn -q -B -Dstyle.color=never -f "$HERE/pom.xml" ${DYNCC_MAVEN_ARGS:-} \
        -Dmaven.wagon.http.retryHandler.count=3 \
        dependency:copy-dependencies -DoutputDirectory="$tmp" >"$mvnlog" 2>&1; then
        tail -n 40 "$mvnlog" >&2
        rm -rf "$tmp"
        die "Maven could not fetch the Kafka jars (log: $mvnlog)"
    fi
    ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || { rm -rf "$tmp"; die "kafka_2.13 jar missing after fetch"; }
    pom_sum >"$tmp/.dyncc-fetched"
    rm -rf "$LIBS"
    mv "$tmp" "$LIBS"
    log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars in $(($(now_ms) - t0)) ms"
}

render_conf() {
    mkdir -p "$DATA_DIR" "$LOG_DIR"
    sed -e "s|@DATA_DIR@|$DATA_DIR|g" \
        -e "s|@PORT@|$PORT|g" \
        -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" \
        "$HERE/server.properties" >"$CONF.tmp"
    if [[ -n $TLS_PORT || -n $MTLS_PORT ]]; then
        tls_conf >>"$CONF.tmp"
    fi
    if [[ -n $ACLS ]]; then
        [[ -n $TLS_PORT || -n $MTLS_PORT ]] || die "DYNCC_KAFKA_ACLS needs DYNCC_KAFKA_TLS_PORT or DYNCC_KAFKA_MTLS_PORT (clients must authenticate)"
        [[ -r $ACLS ]] || die "DYNCC_KAFKA_ACLS: cannot read $ACLS"
        acl_conf >>"$CONF.tmp"
    fi
    mv "$CONF.tmp" "$CONF"
}

# tls_setup: certificates and the SCRAM users file, made when missing.
tls_setup() {
    [[ -n $TLS_PORT || -n $MTLS_PORT ]] || return 0
    if [[ ! -f $TLS_DIR/broker.pem || ! -f $TLS_DIR/ca.crt ]]; then
        bash "$HERE/../tls/make-certs.sh" "$TLS_DIR" || die "could not make the TLS certificates in $TLS_DIR"
    fi
    if [[ ! -s $SCRAM_USERS ]]; then
        (umask 077 && echo "dyncc:$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')" >"$SCRAM_USERS")
        log "SCRAM user 'dyncc' with a random password in $SCRAM_USERS"
    fi
}

# tls_conf: the listener overrides (appended: the last value of a key wins).
tls_conf() {
    local listeners="PLAINTEXT://127.0.0.1:$PORT" map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if [[ -n $TLS_PORT ]]; then
        listeners+=",SASL_SSL://127.0.0.1:$TLS_PORT"
        map+=",SASL_SSL:SASL_SSL"
    fi
    if [[ -n $MTLS_PORT ]]; then
        listeners+=",MTLS://127.0.0.1:$MTLS_PORT"
        map+=",MTLS:SSL"
    fi
    cat <<EOF

############################# TLS (DYNCC_KAFKA_TLS_PORT / DYNCC_KAFKA_MTLS_PORT) #############################
listeners=$listeners,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=$listeners
listener.security.protocol.map=$map
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.crt
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.mtls.ssl.client.auth=required
EOF
}

# acl_conf: the authorizer (appended).  The plaintext and controller listeners are the loopback
# admin and inter-broker ones: their principal, User:ANONYMOUS, is the super user.
acl_conf() {
    cat <<'EOF'

############################# ACLs (DYNCC_KAFKA_ACLS) #############################
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:ANONYMOUS
ssl.principal.mapping.rules=RULE:^CN=([^,]+)$/$1/,DEFAULT
EOF
}

cmd_acls() {
    [[ -n $ACLS ]] || die "set DYNCC_KAFKA_ACLS=FILE (the roles: deploy/kafka/acl-roles)"
    local py
    py=$(python_for_wait)
    [[ -n $py ]] || die "no python with confluent_kafka to apply the ACLs (DYNCC_PYTHON)"
    "$py" "$HERE/acls.py" "127.0.0.1:$PORT" "$ACLS" || die "could not apply the ACLs of $ACLS"
}

# JAVA_CMD: java with heap/GC/logging options and the jar class path.
read -r -a _heap <<<"$HEAP_OPTS"
JAVA_CMD=(java "${_heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent
    -Djava.awt.headless=true
    "-Dkafka.logs.dir=$LOG_DIR"
    "-Dlog4j.configuration=file:$HERE/log4j.properties"
    -cp "$LIBS/*")

format_storage() {
    if [[ -f $DATA_DIR/meta.properties ]]; then
        return 0
    fi
    local cid
    if [[ -s $KDIR/cluster.id ]]; then
        cid=$(<"$KDIR/cluster.id")
    else
        # Kafka Uuid: 16 random bytes, URL-safe base64 without padding; one starting with '-'
        # would be read as an option by kafka-storage, so draw again (1 in 64 ids).
        cid=-
        while [[ $cid == -* ]]; do
            cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
        done
        echo "$cid" >"$KDIR/cluster.id"
    fi
    log "formatting storage in $DATA_DIR (cluster id $cid)"
    local scram=() line
    if [[ -n $TLS_PORT && -s $SCRAM_USERS ]]; then
        while IFS= read -r line || [[ -n $line ]]; do
            [[ -z $line || $line == \#* ]] && continue
            [[ $line =~ ^[A-Za-z0-9_-]+:[A-Za-z0-9_-]+$ ]] || die "bad line in $SCRAM_USERS: use name:password (letters, digits, '-', '_')"
            scram+=(--add-scram "SCRAM-SHA-512=[name=${line%%:*},password=${line#*:}]")
        done <"$SCRAM_USERS"
    fi
    "${JAVA_CMD[@]}" kafka.tools.StorageTool format -t "$cid" -c "$CONF" --ignore-formatted "${scram[@]}" \
        >>"$LOG_DIR/format.log" 2>&1 \
        || { tail -n 20 "$LOG_DIR/format.log" >&2; die "storage format failed (see $LOG_DIR/format.log)"; }
}

cmd_start() {
    if pid_alive "$PIDFILE" "$PATTERN"; then
        log "already running (pid $(<"$PIDFILE"), port $PORT)"
        return 0
    fi
    fetched || cmd_fetch
    local p
    for p in "$PORT" "$CONTROLLER_PORT" $TLS_PORT $MTLS_PORT; do
        port_open "$p" && die "port $p is already in use by another process (set DYNCC_KAFKA_PORT / DYNCC_KAFKA_CONTROLLER_PORT / DYNCC_KAFKA_TLS_PORT / DYNCC_KAFKA_MTLS_PORT)"
    done
    tls_setup
    render_conf
    format_storage
    # Fresh server.log per start, so `wait` never sees an old "started" line.
    if [[ -f $LOG_DIR/server.log ]]; then mv -f "$LOG_DIR/server.log" "$LOG_DIR/server.log.prev"; fi
    log "starting broker on 127.0.0.1:$PORT (controller $CONTROLLER_PORT${TLS_PORT:+, SASL_SSL $TLS_PORT}${MTLS_PORT:+, mTLS $MTLS_PORT}), logs in $LOG_DIR"
    launch_bg "$PIDFILE" "$LOG_DIR/kafka.out" "${JAVA_CMD[@]}" kafka.Kafka "$CONF"
}

python_for_wait() {
    local py=${DYNCC_PYTHON:-$DYNCC_REPO/.venv/bin/python}
    if [[ -x $py ]] && "$py" -c 'import confluent_kafka' 2>/dev/null; then
        echo "$py"
    fi
}

cmd_wait() {
    local t0 deadline py
    t0=$(now_ms)
    deadline=$((t0 + WAIT_TIMEOUT * 1000))
    py=$(python_for_wait)
    while :; do
        if ! pid_alive "$PIDFILE" "$PATTERN"; then
            tail -n 30 "$LOG_DIR/server.log" "$LOG_DIR/kafka.out" 2>/dev/null >&2 || true
            die "broker is not running (see $LOG_DIR)"
        fi
        if port_open "$PORT" && grep -qs 'Kafka Server started' "$LOG_DIR/server.log"; then
            break
        fi
        (($(now_ms) < deadline)) || die "broker did not come up on 127.0.0.1:$PORT within ${WAIT_TIMEOUT}s (see $LOG_DIR/server.log)"
        sleep 0.2
    done
    if [[ -n $py ]]; then
        # A real metadata round trip through librdkafka.
        local left=$(((deadline - $(now_ms)) / 1000))
        ((left > 0)) || left=1
        "$py" - "127.0.0.1:$PORT" "$left" <<'PY' || die "broker on 127.0.0.1:$PORT does not answer metadata requests"
import sys, time
from confluent_kafka.admin import AdminClient
bootstrap, timeout = sys.argv[1], float(sys.argv[2])
deadline = time.monotonic() + timeout
admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
while True:
    try:
        md = admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
        if md.brokers:
            break
        err = "no brokers in metadata"
    except Exception as exc:  # KafkaException while the broker settles
        err = str(exc)
    if time.monotonic() > deadline:
        print(f"metadata request failed: {err}", file=sys.stderr)
        sys.exit(1)
    time.sleep(0.2)
PY
    fi
    log "ready on 127.0.0.1:$PORT after $(($(now_ms) - t0)) ms"
    if [[ -n $ACLS ]]; then cmd_acls; fi
}

cmd_stop() {
    stop_pid "$PIDFILE" "$PATTERN" "broker" "${DYNCC_KAFKA_STOP_TIMEOUT:-30}"
}

cmd_status() {
    if pid_alive "$PIDFILE" "$PATTERN"; then
        echo "kafka: running (pid $(<"$PIDFILE"), 127.0.0.1:$PORT, data $DATA_DIR)"
    else
        echo "kafka: stopped"
        return 3
    fi
}

case ${1:-} in
    fetch) cmd_fetch ;;
    start) cmd_start ;;
    wait) cmd_wait ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    acls) cmd_acls ;;
    restart) cmd_stop; cmd_start; cmd_wait ;;
    *) echo "usage: $0 {fetch|start|wait|stop|status|acls|restart}" >&2; exit 2 ;;
esac
