#!/bin/sh
# C18: the node CA's revocation list at 100,000 revoked certificates (domain::pki::crl, release
# build) next to a raw `openssl ca -gencrl` of the same entries (a P-256 CA of openssl's own,
# SHA-256, with the same two extensions: authorityKeyIdentifier and cRLNumber). Prints, per run,
# the DER size and the build-and-sign time of each; quote the median of the runs.
#
#   benchmarks/crl-gencrl.sh [runs, default 3]
set -eu
runs=${1:-3}
# CRL_BENCH_PROFILE=dev measures the debug build (no release build needed; slower, not comparable).
profile=${CRL_BENCH_PROFILE:-release}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$(dirname "$0")/.."
i=1
while [ "$i" -le "$runs" ]; do
    out=$(CRL_MEASURE_OUT=$dir cargo test -q --profile "$profile" -p domain --lib pki::crl::tests::measure -- --ignored --nocapture 2>&1 | grep '100000 entries')
    ours_bytes=$(stat -c %s "$dir/crl-100k.der")
    ours_time=${out##*signed in }
    # openssl's CA over the same index (serials and revocation dates).
    ca="$dir/ossl"
    rm -rf "$ca" && mkdir -p "$ca"
    cp "$dir/index.txt" "$ca/index.txt"
    echo 01 > "$ca/crlnumber"
    openssl ecparam -name prime256v1 -genkey -noout -out "$ca/key.pem" 2>/dev/null
    openssl req -new -x509 -key "$ca/key.pem" -subj /CN=raw-ca -days 2 -out "$ca/ca.pem" 2>/dev/null
    cat > "$ca/ca.cnf" <<CNF
[ca]
default_ca = raw
[raw]
database = $ca/index.txt
crlnumber = $ca/crlnumber
certificate = $ca/ca.pem
private_key = $ca/key.pem
default_md = sha256
default_crl_hours = 1
crl_extensions = crl_ext
[crl_ext]
authorityKeyIdentifier = keyid:always
CNF
    start=$(date +%s%N)
    openssl ca -gencrl -config "$ca/ca.cnf" -out "$ca/raw.pem" 2>/dev/null
    end=$(date +%s%N)
    openssl crl -in "$ca/raw.pem" -outform DER -out "$ca/raw.der"
    raw_bytes=$(stat -c %s "$ca/raw.der")
    raw_entries=$(openssl crl -in "$ca/raw.pem" -noout -text | grep -c 'Serial Number:')
    echo "run $i: ours $ours_bytes bytes DER in $ours_time; openssl ca -gencrl $raw_bytes bytes DER ($raw_entries entries) in $(( (end - start) / 1000000 )) ms"
    i=$((i + 1))
done
