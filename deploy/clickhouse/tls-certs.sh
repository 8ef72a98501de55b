#!/usr/bin/env bash
# tls-certs.sh DIR: a test CA and a server certificate it signs, for ClickHouse's TLS port.
#
#   DIR/ca.crt       the CA clients trust (store URL ?secure=1&ca_certs=DIR/ca.crt)
#   DIR/server.crt   CN=localhost, subjectAltName DNS:localhost, IP:127.0.0.1, IP:::1
#   DIR/server.key   its key (mode 600); the CA's key stays in DIR/ca.key
# Files that exist already are kept (a restart keeps the certificate clients trust).
# Env: DYNCC_CH_TLS_DAYS (825).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_dyncc_tag=clickhouse-tls
# shellcheck source=deploy/lib.sh
. "$HERE/../lib.sh"

DIR=${1:?usage: $0 DIR}
DAYS=${DYNCC_CH_TLS_DAYS:-825}
command -v openssl >/dev/null || die "openssl is not installed"
mkdir -p "$DIR"
umask 077
if [[ ! -s $DIR/ca.crt || ! -s $DIR/ca.key ]]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days "$DAYS" \
        -subj "/CN=dyncc test ClickHouse CA" -keyout "$DIR/ca.key" -out "$DIR/ca.crt" 2>/dev/null
    rm -f "$DIR/server.crt"
    log "made the CA $DIR/ca.crt"
fi
if [[ ! -s $DIR/server.crt || ! -s $DIR/server.key ]]; then
    openssl req -new -newkey rsa:2048 -nodes -sha256 -subj "/CN=localhost" \
        -keyout "$DIR/server.key" -out "$DIR/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n' >"$DIR/server.ext"
    openssl x509 -req -sha256 -days "$DAYS" -in "$DIR/server.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" \
        -CAcreateserial -extfile "$DIR/server.ext" -out "$DIR/server.crt" 2>/dev/null
    rm -f "$DIR/server.csr" "$DIR/server.ext"
    log "made the server certificate $DIR/server.crt"
fi
chmod 644 "$DIR/ca.crt" "$DIR/server.crt"
