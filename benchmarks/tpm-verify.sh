#!/usr/bin/env bash
# Instruction counts (callgrind Ir) of the tpm attestor per join, next to the crypto a TPM join
# cannot avoid, for the RSA-2048 and the ECC P-384 EK (issue 19). Instruction counts do not move
# with the host's load, so this is the figure to compare; domain/benches/tpm_verify.rs (run
# without arguments) gives the wall-time medians.
#
#   benchmarks/tpm-verify.sh [count] [top]
#
# Builds domain/benches/tpm_verify.rs in the bench profile (release, with symbols), then runs
# each part under `valgrind --tool=callgrind` with `--callgrind KIND PART count` (default 20):
# the harness starts a real swtpm, makes real evidence with tpm2-tools (child processes,
# not traced), runs the part once, then `count` times between its `measure_begin` and
# `measure_end` markers; the second dump holds those runs alone. Prints Ir per join of each
# part, the attestor (round1 + round2) against its own floor (chain + seed + quote-verify +
# certify-verify) and the join's floor (plus csr-verify + cert-sign), then callgrind_annotate's
# `top` (default 15) functions by self Ir of each round. Raw files stay in $CALLGRIND_OUT.
set -euo pipefail

cd "$(dirname "$0")/.."
count=${1:-20}
top=${2:-15}
out=${CALLGRIND_OUT:-$(mktemp -d -t tpm-verify.XXXXXX)}
mkdir -p "$out"

command -v valgrind >/dev/null || { echo "tpm-verify.sh: valgrind is not installed" >&2; exit 1; }

build_log="$out/build.log"
if ! cargo bench -p domain --bench tpm_verify --no-run >"$build_log" 2>&1; then
    cat "$build_log" >&2
    exit 1
fi
bin=$(sed -n 's/^ *Executable .*(\(.*\))$/\1/p' "$build_log" | tail -n 1)
[ -x "$bin" ] || { echo "tpm-verify.sh: no tpm_verify executable in $build_log" >&2; exit 1; }

# Ir per run of one part.
measure() {
    local kind=$1 part=$2 n=$3 op="$1-$2"
    rm -f "$out/$op".*
    if ! valgrind --tool=callgrind --callgrind-out-file="$out/$op.%p" \
        --dump-before='*measure_begin*' --dump-before='*measure_end*' \
        "$bin" --callgrind "$kind" "$part" "$n" >"$out/$op.stdout" 2>"$out/$op.stderr"; then
        echo "tpm-verify.sh: $op failed; see $out/$op.stderr" >&2
        exit 1
    fi
    local units dump total
    units=$(sed -n 's/^units=//p' "$out/$op.stdout")
    dump=$(ls "$out/$op".*.2 2>/dev/null | head -n 1)
    [ -n "$units" ] && [ -n "$dump" ] || { echo "tpm-verify.sh: no measurement for $op in $out" >&2; exit 1; }
    total=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$dump" | head -n 1)
    awk -v t="$total" -v u="$units" 'BEGIN { printf "%d\n", t / u }'
}

parts=(round1 round2 chain seed quote-verify certify-verify csr-verify cert-sign)
declare -A ir
for kind in rsa p384; do
    for part in "${parts[@]}"; do
        ir[$kind-$part]=$(measure "$kind" "$part" "$count")
    done
done

commas='function c(n,  s) { s = sprintf("%d", n); while (s ~ /[0-9]{4}/) sub(/[0-9]{3}(,|$)/, ",&", s); return s }'
num() { awk -v a="$1" "$commas"' BEGIN { print c(a) }'; }

echo "Instruction counts (callgrind Ir) per join, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git describe --always --dirty), count $count"
echo
echo "| part | RSA-2048 EK | P-384 EK |"
echo "| --- | ---: | ---: |"
for part in "${parts[@]}"; do
    echo "| $part | $(num "${ir[rsa-$part]}") | $(num "${ir[p384-$part]}") |"
done
declare -A att own join
for kind in rsa p384; do
    att[$kind]=$((${ir[$kind-round1]} + ${ir[$kind-round2]}))
    own[$kind]=$((${ir[$kind-chain]} + ${ir[$kind-seed]} + ${ir[$kind-quote-verify]} + ${ir[$kind-certify-verify]}))
    join[$kind]=$((${own[$kind]} + ${ir[$kind-csr-verify]} + ${ir[$kind-cert-sign]}))
done
echo "| **attestor (round1 + round2)** | $(num "${att[rsa]}") | $(num "${att[p384]}") |"
echo "| own floor (chain + seed + 2 verifies) | $(num "${own[rsa]}") | $(num "${own[p384]}") |"
echo "| join floor (own + csr-verify + cert-sign) | $(num "${join[rsa]}") | $(num "${join[p384]}") |"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f×", a / b }'; }
echo "| ratio attestor / own floor | $(ratio "${att[rsa]}" "${own[rsa]}") | $(ratio "${att[p384]}" "${own[p384]}") |"
echo "| ratio attestor / join floor | $(ratio "${att[rsa]}" "${join[rsa]}") | $(ratio "${att[p384]}" "${join[p384]}") |"
echo "| attestor above own floor | $(num $((${att[rsa]} - ${own[rsa]}))) | $(num $((${att[p384]} - ${own[p384]}))) |"

# callgrind_annotate's lines ("Ir (pct) file:function [object]") as "Ir-per-join function". It runs
# from / : in the repository it names our files relatively and splits their functions apart.
per_join() {
    sed -n 's/^ *\([0-9,]*\) ([^)]*) *[^: ]*:\(.*\) \[.*$/\1 \2/p' | tr -d , \
        | awk -v n="$count" "$commas"'{ ir = $1; $1 = ""; printf "    %12s %s\n", c(ir / n), substr($0, 2, 150) }'
}
if command -v callgrind_annotate >/dev/null; then
    for op in rsa-round1 rsa-round2 p384-round1 p384-round2; do
        dump=$(ls "$out/$op".*.2 | head -n 1)
        echo
        echo "$op: top $top functions by self Ir per join"
        (cd / && callgrind_annotate --inclusive=no --threshold=100 "$dump" 2>/dev/null) \
            | grep ' \[' | grep -vE 'PROGRAM TOTALS|\(below main\)|libc_start|lang_start|:0x0|:main \[' \
            | per_join | head -n "$top" || true
        echo "$op: the attestor's own functions, inclusive Ir per join"
        (cd / && callgrind_annotate --inclusive=yes --threshold=100 "$dump" 2>/dev/null) \
            | grep ' \[' | grep -E ':<?domain::attest::tpm' | per_join | head -n "$top" || true
    done
fi
echo
echo "callgrind files: $out"
