#!/usr/bin/env bash
# Makes a certificate authority, a certificate signed by it and two tokens:
# enough to run embedps with TLS and tokens on a test cluster. Production
# deployments take their certificates from their own PKI (cert-manager on
# Kubernetes, see docs/deploy.md).
#
#   security/make_certs.sh DIR [NAME...]
#
# Writes into DIR (created, mode 700):
#   ca.pem ca.key          the CA (keep ca.key away from the servers)
#   node.pem node.key      a certificate for every process, valid for
#                          localhost, 127.0.0.1 and each NAME (a DNS name or
#                          an IP address), usable as server and client
#   other-ca.pem           a second CA, and other.pem other.key signed by
#   other.pem other.key    it (for tests: a peer nobody should trust)
#   train.token read.token random tokens (one line each)
# Keys are P-256 ECDSA; certificates last 30 days.
set -euo pipefail
dir=${1:?usage: make_certs.sh DIR [NAME...]}
shift
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
umask 077

sans="DNS:localhost,IP:127.0.0.1"
for name in "$@"; do
  if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then
    sans+=",IP:$name"
  else
    sans+=",DNS:$name"
  fi
done

make_ca() {  # name
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$1.key" -out "$1.pem" -days 30 -subj "/CN=embedps $1" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

make_leaf() {  # ca name
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$2.key" -out "$2.csr" -subj "/CN=embedps $2" 2>/dev/null
  printf '%s\n' "subjectAltName=$sans" \
    "extendedKeyUsage=serverAuth,clientAuth" \
    "basicConstraints=critical,CA:FALSE" >"$2.ext"
  openssl x509 -req -in "$2.csr" -CA "$1.pem" -CAkey "$1.key" \
    -CAcreateserial -days 30 -extfile "$2.ext" -out "$2.pem" 2>/dev/null
  rm -f "$2.csr" "$2.ext"
}

make_ca ca
make_leaf ca node
make_ca other-ca
make_leaf other-ca other
openssl rand -hex 24 >train.token
openssl rand -hex 24 >read.token
rm -f ./*.srl
echo "certificates and tokens in $(pwd)"
