#!/usr/bin/env bash
# Make what deploy/compose.tls.yaml mounts: a test CA, the server's certificate (names
# "server", "localhost", 127.0.0.1) and a credential file with the user "example".
#
#   deploy/make-tls-example.sh [DIR]     (default deploy/tls; needs openssl and .venv)
#
# For trying TLS out, not for production: the CA's key stays beside the certificates, and the
# files are readable by the container's user (uid 10001) through a read-only mount.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-deploy/tls}
venv=${VENV:-.venv}
mkdir -p "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" -subj "/O=stratalog example/CN=example CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$dir/server.key" -out "$dir/server.csr" -subj "/CN=server" 2>/dev/null
printf 'subjectAltName=DNS:server,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
    > "$dir/server.ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 30 -out "$dir/server.crt" -extfile "$dir/server.ext" 2>/dev/null
rm -f "$dir/server.csr" "$dir/server.ext"
head -c 18 /dev/urandom | base64 > "$dir/password"
"$venv/bin/stratalog" credentials add --file "$dir/credentials.json" --user example \
    --password-file "$dir/password"
chmod 0644 "$dir"/*.crt "$dir/server.key" "$dir/credentials.json" "$dir/password"
echo "made $dir: ca.crt, server.crt/.key, credentials.json (user example), password"
