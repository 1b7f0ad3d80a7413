#!/usr/bin/env bash
# The idle cost of the control plane to Postgres (issue 25, "Must show"): the transactions per
# second idle processes cause in their database, read from pg_stat_database over a window, next to
# the same database's own floor over the same window with nothing connected. Two scenarios:
#
#   one: one idle `bcctl up` (serve with every role: api, gateway, admin, audit sequencer,
#        maintenance; no node, no request);
#   ten: one idle `bcctl serve --role api` and 10 idle `bcctl serve --role gateway` on the same
#        database (the per-process figure is the total over the 11 processes).
#
# Usage: benchmarks/idle-cost.sh [window seconds, default 60] [warm-up seconds, default 10] [scenario: one|ten|both, default both]
# Needs: a release bcctl (cargo build --release -p cli), psql, DATABASE_URL naming a server
# where the user may create databases (default postgres://postgres@127.0.0.1:5432/postgres).
# The counters are read from a connection to another database, so the sampling is not counted.
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-60}
warmup=${2:-10}
scenario=${3:-both}
admin_url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
bcctl=$PWD/target/release/bcctl
[ -x "$bcctl" ] || { echo "idle-cost: build it first: cargo build --release -p cli" >&2; exit 2; }
base=${admin_url%/*}
work=$(mktemp -d)
pids=()
gws=()
dbs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for d in "${dbs[@]}"; do psql "$admin_url" -qAtc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

xacts() {
  psql "$admin_url" -qAtc "SELECT pg_stat_clear_snapshot(); SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$1'" | tail -1
}

# Waits until FILE holds PATTERN (a process's start line), or fails naming the log.
wait_for() {
  local file=$1 pattern=$2 pid=$3
  for _ in $(seq 1 600); do
    grep -q "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "idle-cost: the process logging to $file exited:" >&2; tail -20 "$file" >&2; exit 1; }
    sleep 0.1
  done
  echo "idle-cost: no '$pattern' in $file within 60 s" >&2; tail -20 "$file" >&2; exit 1
}

# Measures database $1 over the window after the warm-up; prints "rate connections".
measure() {
  sleep "$warmup"
  local t0 t1 s0 s1 backends
  t0=$(xacts "$1"); s0=$(date +%s.%N)
  sleep "$window"
  t1=$(xacts "$1"); s1=$(date +%s.%N)
  backends=$(psql "$admin_url" -qAtc "SELECT count(*) FROM pg_stat_activity WHERE datname = '$1'")
  awk -v a="$t0" -v b="$t1" -v s="$s0" -v e="$s1" -v c="$backends" 'BEGIN { printf "%.2f %s\n", (b - a) / (e - s), c }'
}

new_db() {
  local db="bc_idle_$1_$$"
  psql "$admin_url" -qAtc "CREATE DATABASE $db" >/dev/null
  dbs+=("$db")
  echo "$db"
}

# The floor: a database alone, nothing connected.
floor_db=$(new_db floor)
f0=$(xacts "$floor_db"); sleep "$window"; f1=$(xacts "$floor_db")
floor=$(awk -v a="$f0" -v b="$f1" -v w="$window" 'BEGIN { printf "%.2f", (b - a) / w }')
echo "idle-cost: the database alone over $window s: $floor transactions/s"

if [ "$scenario" = one ] || [ "$scenario" = both ]; then
  db=$(new_db one)
  "$bcctl" up --port 0 --json --dir "$work/up" --database-url "$base/$db" >"$work/up.json" 2>"$work/up.log" &
  pids+=($!)
  wait_for "$work/up.json" . "${pids[-1]}"
  read -r rate conns < <(measure "$db")
  echo "idle-cost: one idle bcctl up on Postgres over $window s: $rate transactions/s ($conns connections open)"
fi

if [ "$scenario" = ten ] || [ "$scenario" = both ]; then
  db=$(new_db ten)
  export BC_DEPLOYMENT_SECRET=idle-cost-bench-secret-0123456789abcdef
  export BC_METRICS_LISTEN=off
  "$bcctl" pki init --trust-domain idle.example --out "$work/pki.json" >/dev/null
  "$bcctl" pki issue-internal --pki "$work/pki.json" --name gateway --serving-name localhost \
    --serving-name 127.0.0.1 --cert-out "$work/internal.crt" --key-out "$work/internal.key" >/dev/null
  DATABASE_URL="$base/$db" BC_PKI_BUNDLE="$work/pki.json" BC_LISTEN=127.0.0.1:0 \
    BC_API_INTERNAL_LISTEN=127.0.0.1:0 BC_API_HEALTH_LISTEN=off "$bcctl" serve --role api 2>"$work/api.log" &
  pids+=($!)
  wait_for "$work/api.log" "internal endpoint on " "${pids[-1]}"
  api=$(grep -o "internal endpoint on [^ ]*" "$work/api.log" | head -1 | awk '{print $4}')
  for i in $(seq 1 10); do
    DATABASE_URL="$base/$db" BC_PKI_BUNDLE="$work/pki.json" BC_LISTEN=127.0.0.1:0 \
      BC_API_INTERNAL_URL="localhost:${api##*:}" BC_INTERNAL_CERT="$work/internal.crt" \
      BC_INTERNAL_KEY="$work/internal.key" "$bcctl" serve --role gateway 2>"$work/gw$i.log" &
    pids+=($!)
    gws[i]=$!
  done
  for i in $(seq 1 10); do wait_for "$work/gw$i.log" "listening on " "${gws[i]}"; done
  read -r rate conns < <(measure "$db")
  per=$(awk -v r="$rate" 'BEGIN { printf "%.2f", r / 11 }')
  echo "idle-cost: one idle api and 10 idle gateways on Postgres over $window s: $rate transactions/s in all, $per per process ($conns connections open)"
fi
