#!/usr/bin/env bash
# Instruction counts of one join, one renewal and one rebuilt event in our own process, next to
# the crypto a join (a renewal) cannot avoid, counted by callgrind. Instruction counts do not
# move with the host's load, so this is the figure to watch for our CPU.
#
#   benchmarks/callgrind.sh [count]
#
# Builds commands/benches/cost.rs in the bench profile (release, with symbols), then runs each
# operation under `valgrind --tool=callgrind`, dumping the counters on entering the harness's
# `measure_begin` and `measure_end` markers: the second dump holds the measured runs alone
# (setup and warm-up excluded), in every thread of the process.
# `count` (default 1) is how many joins, renewals or crypto operations are measured; the rebuild
# always replays its whole log (1,025 events) and is divided by its event count.
# The raw callgrind files stay in $CALLGRIND_OUT (default: a fresh temporary directory).
set -euo pipefail

cd "$(dirname "$0")/.."
count=${1:-1}
out=${CALLGRIND_OUT:-$(mktemp -d -t callgrind.XXXXXX)}
mkdir -p "$out"

command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 1; }

build_log="$out/build.log"
if ! cargo bench -p commands --bench cost --no-run >"$build_log" 2>&1; then
    cat "$build_log" >&2
    exit 1
fi
bin=$(sed -n 's/^ *Executable .*(\(.*\))$/\1/p' "$build_log" | tail -n 1)
[ -x "$bin" ] || { echo "callgrind.sh: no cost executable in $build_log" >&2; exit 1; }

# Ir per unit of one operation.
measure() {
    local op=$1 n=$2
    rm -f "$out/$op".*
    if ! valgrind --tool=callgrind --callgrind-out-file="$out/$op.%p" \
        --dump-before='*measure_begin*' --dump-before='*measure_end*' \
        "$bin" "$op" "$n" >"$out/$op.stdout" 2>"$out/$op.stderr"; then
        echo "callgrind.sh: $op failed; see $out/$op.stderr" >&2
        exit 1
    fi
    local units dump total
    units=$(sed -n 's/^units=//p' "$out/$op.stdout")
    # Dump 1 (at measure_begin) holds the setup, dump 2 (at measure_end) the measured runs.
    # (With `--zero-before` instead, the summary line over-counts a process of several threads.)
    dump=$(ls "$out/$op".*.2 2>/dev/null | head -n 1)
    [ -n "$units" ] && [ -n "$dump" ] || { echo "callgrind.sh: no measurement for $op in $out" >&2; exit 1; }
    total=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$dump" | head -n 1)
    awk -v t="$total" -v u="$units" 'BEGIN { printf "%d\n", t / u }'
}

declare -A ir
for op in join renew rebuild csr-verify ecdh-open cert-sign response-sign pop-verify read; do
    ir[$op]=$(measure "$op" "$count")
done

join_floor=$((${ir[csr-verify]} + ${ir[ecdh-open]} + ${ir[cert-sign]} + ${ir[response-sign]}))
renew_floor=$((${ir[csr-verify]} + ${ir[pop-verify]} + ${ir[cert-sign]}))

# 1234567 -> 1,234,567
commas='function c(n,  s) { s = sprintf("%d", n); while (s ~ /[0-9]{4}/) sub(/[0-9]{3}(,|$)/, ",&", s); return s }'
row() { awk -v a="$2" -v b="$3" -v name="$1" -v ref="$4" \
    "$commas"' BEGIN { printf "| %s | %s | %s | %.2f× | %s |\n", name, c(a), c(b), a / b, ref }'; }

echo "Instruction counts (callgrind Ir), $(date -u +%Y-%m-%dT%H:%MZ), commit $(git describe --always --dirty), count $count"
echo
echo "| operation | Ir | floor Ir | ratio | floor |"
echo "| --- | ---: | ---: | ---: | --- |"
row "one join (no database)" "${ir[join]}" "$join_floor" "CSR verify + ECDH open + certificate sign + response sign"
row "one renewal (no database)" "${ir[renew]}" "$renew_floor" "CSR verify + renew-pop verify + certificate sign"
row "one rebuilt event (SQLite, every projection)" "${ir[rebuild]}" "${ir[read]}" "raw read of one event from the same SQLite log"
echo
echo "| crypto alone | Ir |"
echo "| --- | ---: |"
for op in csr-verify ecdh-open cert-sign response-sign pop-verify; do
    awk -v a="${ir[$op]}" -v name="$op" "$commas"' BEGIN { printf "| %s | %s |\n", name, c(a) }'
done
echo
echo "callgrind files: $out"
