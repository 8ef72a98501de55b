#!/usr/bin/env bash
# A small test PKI for Kafka over TLS (openssl only).
#
#   make-certs.sh DIR [DAYS]
#
# Writes into DIR (created, mode 700; existing files are kept unless DYNCC_TLS_FORCE=1):
#   ca.crt ca.key                    a self-signed CA (the one clients trust: ssl.ca.location)
#   broker.crt broker.key broker.pem the broker's certificate for 127.0.0.1 and localhost
#                                    (SAN), signed by the CA; broker.pem = key + chain, the
#                                    broker's PEM keystore
#   client.crt client.key            a client certificate (CN=dyncc-client) for mutual TLS
#   expired.crt expired.key          a client certificate that expired a day ago
#   other-ca.crt other-ca.key        an unrelated CA (a client trusting only it must fail)
# DAYS: validity of the CA and the current certificates (default 825).
# Keys are unencrypted (PKCS#8, mode 600): a test and lab PKI, not a production one.
set -euo pipefail

DIR=${1:?usage: make-certs.sh DIR [DAYS]}
DAYS=${2:-825}
command -v openssl >/dev/null || { echo "make-certs: openssl not found" >&2; exit 1; }
mkdir -p "$DIR"
chmod 700 "$DIR"
cd "$DIR"
umask 077

if [[ -f ca.crt && -f broker.pem && -f client.crt && -f expired.crt && ${DYNCC_TLS_FORCE:-0} != 1 ]]; then
    echo "make-certs: certificates already in $DIR" >&2
    exit 0
fi

quiet() { "$@" >/dev/null 2>&1 || { echo "make-certs: failed: $*" >&2; "$@" >&2 || true; exit 1; }; }

newkey() { quiet openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

ca() { # ca NAME CN
    newkey "$1.key"
    quiet openssl req -x509 -new -key "$1.key" -sha256 -days "$DAYS" -subj "/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$1.crt"
}

sign() { # sign NAME CN EXTFILE DAYS|-expired
    newkey "$1.key"
    quiet openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
    if [[ $4 == -expired ]]; then
        # openssl ca takes explicit start and end dates (YYMMDDHHMMSSZ): valid for a day, ended a day ago
        local db=ca.db
        rm -rf "$db"
        mkdir -p "$db"
        : >"$db/index.txt"
        echo 1000 >"$db/serial"
        cat >"$db/ca.cnf" <<EOF
[ca]
default_ca = test
[test]
database = $db/index.txt
serial = $db/serial
new_certs_dir = $db
default_md = sha256
policy = any
copy_extensions = none
unique_subject = no
[any]
commonName = supplied
EOF
        quiet openssl ca -batch -config "$db/ca.cnf" -cert ca.crt -keyfile ca.key -in "$1.csr" -out "$1.crt" \
            -startdate "$(date -u -d '-2 days' +%y%m%d%H%M%SZ)" -enddate "$(date -u -d '-1 day' +%y%m%d%H%M%SZ)" \
            -extfile "$3" -notext
        rm -rf "$db"
    else
        quiet openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days "$4" \
            -extfile "$3" -out "$1.crt"
    fi
    rm -f "$1.csr"
}

cat >server.ext <<'EOF'
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
EOF
cat >client.ext <<'EOF'
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
EOF

ca ca "dyncc test CA"
ca other-ca "dyncc unrelated CA"
sign broker 127.0.0.1 server.ext "$DAYS"
sign client dyncc-client client.ext "$DAYS"
sign expired dyncc-expired client.ext -expired
cat broker.key broker.crt ca.crt >broker.pem
rm -f server.ext client.ext ca.srl
chmod 600 ./*.key broker.pem
chmod 644 ./*.crt
echo "make-certs: CA, broker, client and expired certificates in $DIR" >&2
