#!/usr/bin/env bash
# Floors for the identity benchmark's two targets, measured on the database alone, with no
# code of ours in the way (benchmarks/RESULTS.md, "Floors"):
#
#   1. rebuild: the final rows of the 1,007,271-event benchmark log written server-side into the
#      real, indexed identity tables in one transaction (INSERT ... SELECT from staging tables),
#      and the same with each table written by its own connection at once. A rebuild must write
#      at least these rows; events/s = 1,007,271 / seconds.
#   2. joins: pgbench running the SQL of one join (join_floor.pgbench) at 16 clients, next to a
#      single-row INSERT (raw_commit.pgbench).
#
# Needs psql and pgbench (postgresql-client). Connects with the libpq environment (PGHOST,
# PGPORT, PGUSER; default: the local Unix socket as postgres). Makes its own database
# (bc_floors_<pid>) from migrations/postgres and drops it at the end.
#
# Usage: benchmarks/sql/floors.sh [rounds]   (default 3; medians are printed)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export PGHOST="${PGHOST:-/var/run/postgresql}" PGUSER="${PGUSER:-postgres}"
rounds="${1:-3}"
db="bc_floors_$$"
events=1007271

psql -qX -d postgres -c "CREATE DATABASE $db" >/dev/null
trap 'psql -qX -d postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null' EXIT
for f in "$root"/migrations/postgres/*.sql; do
  psql -qX -v ON_ERROR_STOP=1 -d "$db" -f "$f" >/dev/null
done
echo "generating the benchmark log's final rows ..."
psql -qX -v ON_ERROR_STOP=1 -d "$db" -f "$here/rebuild_floor_rows.sql" >/dev/null

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
now() { date +%s.%N; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a - b}'; }
per_s() { awk -v n="$1" -v s="$2" 'BEGIN {printf "%.0f", n / s}'; }
tables=(join_tokens:s_tokens nodes:s_nodes node_certs:s_certs attestation_uses:s_uses join_token_uses:s_tuses)

serial=() parallel=()
for _ in $(seq "$rounds"); do
  sql="BEGIN; TRUNCATE nodes, node_certs, attestation_uses, join_token_uses, join_tokens;"
  for t in "${tables[@]}"; do sql+=" INSERT INTO ${t%%:*} SELECT * FROM ${t##*:};"; done
  t0=$(now); psql -qX -v ON_ERROR_STOP=1 -d "$db" -c "$sql COMMIT;" >/dev/null; t1=$(now)
  serial+=("$(minus "$t1" "$t0")")
  t0=$(now)
  for t in "${tables[@]}"; do
    psql -qX -v ON_ERROR_STOP=1 -d "$db" \
      -c "BEGIN; TRUNCATE ${t%%:*} CASCADE; INSERT INTO ${t%%:*} SELECT * FROM ${t##*:}; COMMIT;" >/dev/null &
  done
  wait; t1=$(now)
  parallel+=("$(minus "$t1" "$t0")")
done
s=$(printf '%s\n' "${serial[@]}" | median); p=$(printf '%s\n' "${parallel[@]}" | median)
printf 'rebuild floor, one transaction:      %6.2f s  = %7d events/s  (rounds: %s)\n' \
  "$s" "$(per_s "$events" "$s")" "${serial[*]}"
printf 'rebuild floor, a connection a table: %6.2f s  = %7d events/s  (rounds: %s)\n' \
  "$p" "$(per_s "$events" "$p")" "${parallel[*]}"

psql -qX -v ON_ERROR_STOP=1 -d "$db" \
  -c "TRUNCATE nodes, node_certs, attestation_uses, join_token_uses, join_tokens" \
  -c "INSERT INTO join_tokens SELECT 'tok_' || g, 'syn', 'site-1', 'pool-1', 'node', sha256(g::text::bytea), 100000000, 100000000, 9000000000000000, NULL, NULL, false, 1, NULL, NULL, 1, 1 FROM generate_series(0, 64) g" \
  -c "CREATE TABLE raw_commit (id bigserial PRIMARY KEY, v bytea)" >/dev/null
joins=() raws=()
for _ in $(seq "$rounds"); do
  for f in raw_commit join_floor; do
    tps=$(pgbench -n -M prepared -c 16 -j 2 -T 8 -f "$here/$f.pgbench" "$db" 2>&1 \
      | awk '/^tps = /{print int($3)}')
    if [ "$f" = raw_commit ]; then raws+=("$tps"); else joins+=("$tps"); fi
  done
done
printf 'join floor (the SQL of a join), 16 clients: %6d /s  (rounds: %s)\n' \
  "$(printf '%s\n' "${joins[@]}" | median)" "${joins[*]}"
printf 'raw single-row INSERT, 16 clients:           %6d /s  (rounds: %s)\n' \
  "$(printf '%s\n' "${raws[@]}" | median)" "${raws[*]}"
