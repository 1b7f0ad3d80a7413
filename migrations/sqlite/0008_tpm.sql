-- Step 8, TPM attestation (issue 19): the operator's allow-list of endorsement keys
-- (`bcctl tpm allow`). An entry not revoked places a machine proving that EK; at most one entry
-- per EK is active at a time (the race guard is the EK's stream, tpm-ek/<hex>, appended at the
-- version read).

CREATE TABLE tpm_ek_allows (
    allow_id      TEXT   PRIMARY KEY,
    ek_sha256     BLOB   NOT NULL CHECK (length(ek_sha256) = 32),
    tenant_id     TEXT   NOT NULL,
    site_id       TEXT   NOT NULL,
    pool_id       TEXT   NOT NULL,
    allowed_by    TEXT   NOT NULL,
    note          TEXT   NOT NULL,
    revoked       BOOLEAN NOT NULL DEFAULT FALSE,
    revoked_by    TEXT,
    revoke_reason TEXT,
    created_at_us INTEGER NOT NULL,
    updated_at_us INTEGER NOT NULL,
    version       INTEGER NOT NULL,
    position      INTEGER NOT NULL
);
CREATE INDEX tpm_ek_allows_ek ON tpm_ek_allows (ek_sha256, revoked);
CREATE INDEX tpm_ek_allows_created ON tpm_ek_allows (created_at_us, allow_id);
