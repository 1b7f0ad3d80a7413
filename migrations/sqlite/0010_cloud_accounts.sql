-- Step 10, cloud instance identity (issue 20): the operator's registry of cloud accounts
-- (`bcctl cloud account add`). An entry not removed places the instances of one (provider,
-- account) joining through cloud-iid; at most one entry per (provider, account) is active at a
-- time (the race guard is the account's stream, cloud-account/<provider>/<account>, appended at
-- the version read). Which instances joined is in attestation_uses (attestor cloud-iid).

CREATE TABLE cloud_accounts (
    entry_id      TEXT    PRIMARY KEY,
    provider      TEXT    NOT NULL,
    account       TEXT    NOT NULL,
    tenant_id     TEXT    NOT NULL,
    site_id       TEXT    NOT NULL,
    pool_id       TEXT    NOT NULL,
    role          TEXT    NOT NULL,
    added_by      TEXT    NOT NULL,
    removed       BOOLEAN NOT NULL DEFAULT FALSE,
    removed_by    TEXT,
    remove_reason TEXT,
    created_at_us INTEGER NOT NULL,
    updated_at_us INTEGER NOT NULL,
    version       INTEGER NOT NULL,
    position      INTEGER NOT NULL
);
CREATE INDEX cloud_accounts_account ON cloud_accounts (provider, account, removed);
CREATE INDEX cloud_accounts_created ON cloud_accounts (created_at_us, entry_id);
