-- Issue 39: every operator-managed attestor list in one table. An entry of a list (`tpm-allow`,
-- `cloud-account`, an attestor's own) names a key the attestor looks up and where a machine
-- proving it joins; at most one entry per (list, key) is active at a time (the race guard is
-- the key's stream, appended at the version read). The TPM allow-list's and the cloud
-- accounts' rows move here (their events still replay into this table), and their tables go.

CREATE TABLE attestor_entries (
    entry_id      TEXT    PRIMARY KEY,
    list          TEXT    NOT NULL,
    entry_key     TEXT    NOT NULL,
    tenant_id     TEXT    NOT NULL,
    site_id       TEXT    NOT NULL,
    pool_id       TEXT    NOT NULL,
    role          TEXT,
    added_by      TEXT    NOT NULL,
    note          TEXT    NOT NULL,
    removed       BOOLEAN NOT NULL DEFAULT FALSE,
    removed_by    TEXT,
    remove_reason TEXT,
    created_at_us INTEGER NOT NULL,
    updated_at_us INTEGER NOT NULL,
    version       INTEGER NOT NULL,
    position      INTEGER NOT NULL
);
CREATE INDEX attestor_entries_key ON attestor_entries (list, entry_key, removed);
CREATE INDEX attestor_entries_created ON attestor_entries (list, created_at_us, entry_id);

INSERT INTO attestor_entries (entry_id, list, entry_key, tenant_id, site_id, pool_id, role,
    added_by, note, removed, removed_by, remove_reason, created_at_us, updated_at_us, version,
    position)
SELECT allow_id, 'tpm-allow', lower(hex(ek_sha256)), tenant_id, site_id, pool_id, NULL,
    allowed_by, note, revoked, revoked_by, revoke_reason, created_at_us, updated_at_us, version,
    position
FROM tpm_ek_allows;

INSERT INTO attestor_entries (entry_id, list, entry_key, tenant_id, site_id, pool_id, role,
    added_by, note, removed, removed_by, remove_reason, created_at_us, updated_at_us, version,
    position)
SELECT entry_id, 'cloud-account', provider || '/' || account, tenant_id, site_id, pool_id, role,
    added_by, '', removed, removed_by, remove_reason, created_at_us, updated_at_us, version,
    position
FROM cloud_accounts;

DROP TABLE tpm_ek_allows;
DROP TABLE cloud_accounts;
