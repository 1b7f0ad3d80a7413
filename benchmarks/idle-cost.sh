#!/usr/bin/env bash
# The idle cost of the control plane to Postgres (issue 25, "Must show"): the transactions per
# second one idle `bcctl up` (serve with every role: api, gateway, audit sequencer, maintenance;
# no node, no request) causes in its database, read from pg_stat_database over a window, next to
# the same database's own floor over the same window with nothing connected.
#
# Usage: benchmarks/idle-cost.sh [window seconds, default 60] [warm-up seconds, default 10]
# Needs: a release bcctl (cargo build --release -p cli), psql, DATABASE_URL naming a server
# where the user may create databases (default postgres://postgres@127.0.0.1:5432/postgres).
# The counters are read from a connection to another database, so the sampling is not counted.
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-60}
warmup=${2:-10}
admin_url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
bcctl=target/release/bcctl
[ -x "$bcctl" ] || { echo "idle-cost: build it first: cargo build --release -p cli" >&2; exit 2; }
db="bc_idle_$$"
base=${admin_url%/*}
work=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  psql "$admin_url" -qAtc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
psql "$admin_url" -qAtc "CREATE DATABASE $db" >/dev/null

xacts() {
  psql "$admin_url" -qAtc "SELECT pg_stat_clear_snapshot(); SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$db'" | tail -1
}

# The floor: the database alone, nothing connected.
f0=$(xacts); sleep "$window"; f1=$(xacts)

"$bcctl" up --port 0 --json --dir "$work/up" --database-url "$base/$db" >"$work/up.json" 2>"$work/up.log" &
pid=$!
for _ in $(seq 1 600); do
  [ -s "$work/up.json" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/up.log" >&2; exit 1; }
  sleep 0.1
done
[ -s "$work/up.json" ] || { echo "idle-cost: bcctl up printed nothing in 60 s" >&2; exit 1; }
sleep "$warmup"
t0=$(xacts); s0=$(date +%s.%N)
sleep "$window"
t1=$(xacts); s1=$(date +%s.%N)
backends=$(psql "$admin_url" -qAtc "SELECT count(*) FROM pg_stat_activity WHERE datname = '$db'")
rate=$(awk -v a="$t0" -v b="$t1" -v s="$s0" -v e="$s1" 'BEGIN { printf "%.1f", (b - a) / (e - s) }')
floor=$(awk -v a="$f0" -v b="$f1" -v w="$window" 'BEGIN { printf "%.2f", (b - a) / w }')
printf 'idle-cost: one idle bcctl up on Postgres over %s s: %s transactions/s (%s in %s s; %s connections open); the database alone: %s/s\n' \
  "$window" "$rate" "$((t1 - t0))" "$window" "$backends" "$floor"
