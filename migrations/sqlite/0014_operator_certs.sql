-- Issue 23, operator identities: the certificates the operator CA issued to people and
-- automation for the admin API (`bcctl pki issue-operator`), from the operator/<name> streams'
-- `operator.cert.issued` and `operator.cert.revoked` events. A revoked serial is refused at the
-- admin API's handshake.

CREATE TABLE operator_certs (
    serial             TEXT    PRIMARY KEY,
    name               TEXT    NOT NULL,
    role               TEXT    NOT NULL,
    spiffe_id          TEXT    NOT NULL,
    not_before_us      INTEGER NOT NULL,
    not_after_us       INTEGER NOT NULL,
    certificate_sha256 BLOB NOT NULL CHECK (length(certificate_sha256) = 32),
    revoked            BOOLEAN NOT NULL DEFAULT FALSE,
    revoke_reason      TEXT,
    issued_at_us       INTEGER NOT NULL,
    revoked_at_us      INTEGER,
    version            INTEGER NOT NULL,
    position           INTEGER NOT NULL
);
CREATE INDEX operator_certs_name ON operator_certs (name, issued_at_us);
CREATE INDEX operator_certs_revoked ON operator_certs (revoked);
