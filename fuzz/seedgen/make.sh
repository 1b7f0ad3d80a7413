#!/usr/bin/env bash
# Remakes the fuzz test keys (fuzz/keys/) and every seed in fuzz/corpus/ with the project's own
# code: bc-fuzz-seedgen for the keys, bundles, CSR, token, certificates, identity.json, trust
# bundle, event payloads, leaves and notes; the real `bcctl` (token create, audit seal, audit
# export on a SQLite store) for the audit export seeds and the payloads of the events it wrote.
#
# Run from anywhere: fuzz/seedgen/make.sh. Needs the stable toolchain and python3. Replaces the
# keys, so every seed is remade with them (old seeds sealed to old keys would reach less).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
fuzz="$repo/fuzz"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Built into the project's target/ with its profile, so its dependencies are reused.
export CARGO_TARGET_DIR="$repo/target"
(cd "$here" && cargo build -q)
# BCCTL names an already built bcctl of this same tree, to skip building it.
bcctl="${BCCTL:-}"
if [ -z "$bcctl" ]; then
  (cd "$repo" && cargo build -q -p cli --bin bcctl)
  bcctl="$repo/target/debug/bcctl"
fi

rm -rf "$fuzz/corpus"
"$CARGO_TARGET_DIR/debug/bc-fuzz-seedgen" "$fuzz" "$work"

# A real trail: tokens (events of tenant t-fuzz), two seals, an unsealed tail, then the export.
db="sqlite://$work/events.db"
token() {
  "$bcctl" token create --tenant t-fuzz --site site-1 --pki "$work/pki.json" \
    --database-url "$db" --json >/dev/null
}
seal() {
  "$bcctl" audit seal --tenant t-fuzz --pki "$work/pki.json" --database-url "$db" >/dev/null
}
token; token; token; seal; token; token; seal; token
mkdir -p "$fuzz/corpus/audit_export"
"$bcctl" audit export --tenant t-fuzz --database-url "$db" --out "$fuzz/corpus/audit_export/trail.jsonl" >/dev/null

# The export's first lines alone: a header and checkpoints with no events (a truncation).
python3 - "$fuzz" <<'PY'
import base64, json, sys
fuzz = sys.argv[1]
lines = open(f"{fuzz}/corpus/audit_export/trail.jsonl").read().splitlines()
header = json.loads(lines[0])
n = header["checkpoints"]
open(f"{fuzz}/corpus/audit_export/checkpoints-only.jsonl", "w").write("\n".join(lines[: 1 + n]) + "\n")
# event_decode seeds from the payloads bcctl wrote (selector: the target's type numbers).
kinds = {"token.created": 0, "audit.checkpoint.sealed": 24}
seen = set()
for line in lines[1 + n:]:
    ev = json.loads(line)
    kind = kinds.get(ev["event_type"])
    if kind is None or ev["event_type"] in seen:
        continue
    seen.add(ev["event_type"])
    payload = base64.b64decode(ev["payload"])
    seed = bytes([kind, ev["schema_version"]]) + payload
    open(f"{fuzz}/corpus/event_decode/bcctl-{ev['event_type']}", "wb").write(seed)
# The signed notes of the real checkpoints.
for k, line in enumerate(lines[1 : 1 + n]):
    cp = json.loads(line)
    open(f"{fuzz}/corpus/signed_note/bcctl-checkpoint-{k}.txt", "w").write(cp["signed_note"])
PY
echo "seeds:"; (cd "$fuzz/corpus" && find . -type f | sort | xargs wc -c | tail -1)
