#!/usr/bin/env bash
# Makes a development CA and certificates for a hetps cluster's control
# plane (docs/security.md), with openssl. Not for production: the CA key
# sits beside the certificates, unencrypted.
#
# usage: tools/dev-certs.sh DIR [--nodes "schedd psd-0 psd-1 worker-0 worker-1"]
#                               [--admins "admin"] [--san "DNS:host,IP:10.0.0.5"]
#
# Writes, in DIR (created 0700; existing files are kept, so it is safe to
# run again, and adding a node adds only its files):
#   ca.pem, ca.key                 the CA (EC P-256, 10 years)
#   NAME.pem, NAME.key             per node: CN=NAME, OU=node; per admin:
#                                  CN=NAME, OU=admin (2 years). Server
#                                  names: localhost, 127.0.0.1, this host's
#                                  name, and --san.
#   admin.token, admin-tokens      a random bearer token for psctl
#                                  (--token-file), and its sha256 line for
#                                  daemons' admin_tokens_file
set -euo pipefail

dir=${1:?usage: tools/dev-certs.sh DIR [--nodes "..."] [--admins "..."] [--san "..."]}
shift
nodes="schedd psd-0 psd-1 worker-0 worker-1"
admins="admin"
san_extra=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --admins) admins=$2; shift 2 ;;
    --san) san_extra=$2; shift 2 ;;
    *) echo "dev-certs: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || { echo "dev-certs: openssl not found (tools/bootstrap.sh installs it)" >&2; exit 1; }

mkdir -p "$dir"
chmod 700 "$dir"
umask 077
san="DNS:localhost,IP:127.0.0.1,DNS:$(hostname)"
[ -n "$san_extra" ] && san="$san,$san_extra"

if [ ! -f "$dir/ca.pem" ]; then
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$dir/ca.key" -sha256 -days 3650 -subj "/O=hetps/CN=hetps development CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$dir/ca.pem" 2>/dev/null
fi

issue() {  # issue NAME ROLE
  local name=$1 role=$2
  [ -f "$dir/$name.pem" ] && return 0
  case "$name" in
    *[!A-Za-z0-9._-]*|"") echo "dev-certs: bad name '$name' (letters, digits, . _ - only)" >&2; exit 2 ;;
  esac
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$name.key" 2>/dev/null
  openssl req -new -key "$dir/$name.key" -subj "/O=hetps/OU=$role/CN=$name" -out "$dir/$name.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' \
    "$san" >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 730 -sha256 -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
}

for n in $nodes; do issue "$n" node; done
for a in $admins; do issue "$a" admin; done
if [ ! -f "$dir/admin.token" ]; then
  openssl rand -hex 32 >"$dir/admin.token"
  printf 'sha256:%s\n' "$(tr -d '\n' <"$dir/admin.token" | openssl dgst -sha256 -r | cut -d' ' -f1)" \
    >"$dir/admin-tokens"
fi
echo "dev-certs: $dir: CA, nodes: $nodes; admins: $admins; admin.token"
