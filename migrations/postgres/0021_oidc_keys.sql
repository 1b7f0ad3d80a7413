-- Issue 43 items 1 and 2: the OIDC issuer's signing keys, from the oidc-issuer stream's
-- oidc.key_added, oidc.key_promoted and oidc.key_retired. One row per key; a retired key keeps
-- its row (retired_at_us set) and leaves the JWKS. The private key is stored only sealed under
-- the deployment secret (domain::oidc::seal).

CREATE TABLE oidc_keys (
    kid                 TEXT    PRIMARY KEY,
    public_key_spki     BYTEA   NOT NULL,
    sealed_private_key  BYTEA   NOT NULL,
    -- added | signing | stopped | retired
    state               TEXT    NOT NULL,
    added_at_us         BIGINT  NOT NULL,
    promoted_at_us      BIGINT,
    -- When it stopped signing (another key promoted): the retire window starts here.
    stopped_at_us       BIGINT,
    retired_at_us       BIGINT,
    -- The oidc-issuer stream's version at the last event that changed this row (the stream's
    -- version is the largest of them: every event changes a row).
    version             BIGINT  NOT NULL,
    position            BIGINT  NOT NULL
);
