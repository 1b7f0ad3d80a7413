#!/usr/bin/env bash
# Instructions (callgrind Ir) of one token join, before and after a change of the join path
# (issue 18: the attestor contract). Two figures of commands/benches/cost.rs:
#
#   join          a join's CPU with no database: open the sealed token, verify the CSR, decide
#                 and sign the certificate, encode the events, build and sign the JoinResponse
#                 (the harness calls the domain's functions the way the handler does);
#   service-join  one token join through the real JoinService::join on SQLite in this process
#                 (the SQL and the SQLite engine included), answered and signed as the gateway
#                 does: the harness calls the handler itself, so it follows any change in it.
#
#   benchmarks/join-ir.sh [--at COMMIT | --tree DIR] [count]
#
# `count` (default 20) joins are measured after one warm-up join; the figure is Ir per join.
# `--at COMMIT` measures that commit instead of this tree: its files (`git archive`) in a
# temporary directory, with benchmarks/join-ir/pre-contract.patch applied when its cost.rs has
# no `service-join` (the patch is this harness written against the handler's API before the
# contract, for d99b67d). `--tree DIR` measures the checkout in DIR as it is. Every build shares
# CARGO_TARGET_DIR (default target/join-ir), so the dependencies are built once (the workspace's
# own crates are built again from the tree measured, every time).
# Prints one table row per figure; the raw callgrind files stay in $CALLGRIND_OUT.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
at="" tree=$root
case "${1:-}" in
    --at) at=$2; shift 2 ;;
    --tree) tree=$(cd "$2" && pwd); shift 2 ;;
esac
count=${1:-20}
out=${CALLGRIND_OUT:-$(mktemp -d -t join-ir.XXXXXX)}
mkdir -p "$out"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/join-ir}

command -v valgrind >/dev/null || { echo "join-ir.sh: valgrind is not installed" >&2; exit 1; }

if [ -n "$at" ]; then
    tree=$(mktemp -d -t join-ir-tree.XXXXXX)
    trap 'rm -rf "$tree"' EXIT
    git archive "$at" | tar -x -C "$tree"
    commit=$(git rev-parse --short "$at")
    if ! grep -q '"service-join"' "$tree/commands/benches/cost.rs"; then
        (cd "$tree" && patch -s -p1 <"$root/benchmarks/join-ir/pre-contract.patch")
        commit="$commit + pre-contract.patch"
    fi
else
    commit=$(git -C "$tree" rev-parse --short HEAD)
    git -C "$tree" diff --quiet HEAD -- . ':!commands/benches' || commit="$commit (modified)"
fi

# Trees share the target directory, and cargo gives a workspace crate the same artifact whatever
# its checkout's path, deciding freshness by file times (and `git archive` writes old ones): touch
# the tree's sources so that its workspace crates are built from them, never reused from another
# tree's build. The dependencies stay built.
find "$tree" -path "$tree/target" -prune -o -type f \( -name '*.rs' -o -name '*.proto' \
    -o -name '*.sql' -o -name 'Cargo.toml' -o -name 'build.rs' \) -exec touch {} +

build_log="$out/build.log"
if ! (cd "$tree" && cargo bench -p commands --bench cost --no-run) >"$build_log" 2>&1; then
    cat "$build_log" >&2
    exit 1
fi
bin=$(sed -n 's/^ *Executable .*(\(.*\))$/\1/p' "$build_log" | tail -n 1)
[ -x "$bin" ] || { echo "join-ir.sh: no cost executable in $build_log" >&2; exit 1; }

# Ir per unit of one operation (dump 2, at measure_end, holds the measured runs alone).
measure() {
    local op=$1 n=$2 units dump total
    rm -f "$out/$op".*
    if ! valgrind --tool=callgrind --callgrind-out-file="$out/$op.%p" \
        --dump-before='*measure_begin*' --dump-before='*measure_end*' \
        "$bin" "$op" "$n" >"$out/$op.stdout" 2>"$out/$op.stderr"; then
        echo "join-ir.sh: $op failed; see $out/$op.stderr" >&2
        exit 1
    fi
    units=$(sed -n 's/^units=//p' "$out/$op.stdout")
    dump=$(ls "$out/$op".*.2 2>/dev/null | head -n 1)
    [ -n "$units" ] && [ -n "$dump" ] || { echo "join-ir.sh: no measurement for $op in $out" >&2; exit 1; }
    total=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$dump" | head -n 1)
    awk -v t="$total" -v u="$units" 'BEGIN { printf "%d\n", t / u }'
}

commas='function c(n,  s) { s = sprintf("%d", n); while (s ~ /[0-9]{4}/) sub(/[0-9]{3}(,|$)/, ",&", s); return s }'
echo "Ir per token join (callgrind), $(date -u +%Y-%m-%dT%H:%MZ), code at $commit, count $count"
echo
echo "| operation | Ir per join | commit |"
echo "| --- | ---: | --- |"
for op in join service-join; do
    ir=$(measure "$op" "$count")
    awk -v a="$ir" -v name="$op" -v at="$commit" "$commas"' BEGIN { printf "| %s | %s | %s |\n", name, c(a), at }'
done
echo
echo "callgrind files: $out (callgrind_annotate \$file.2 for the top functions)"
