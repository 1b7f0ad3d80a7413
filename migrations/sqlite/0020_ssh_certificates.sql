-- Issue 42, break-glass SSH: the OpenSSH user certificates the SSH CA issued (`bcctl ssh
-- issue`), from the ssh-cert/<serial> streams' `ssh.user_cert.issued` and
-- `ssh.user_cert.revoked` events. A revoked serial goes on the KRL (`bcctl ssh krl`).

CREATE TABLE ssh_certificates (
    serial             INTEGER  PRIMARY KEY,
    tenant_id          TEXT    NOT NULL,
    node_id            TEXT    NOT NULL,
    account            TEXT    NOT NULL,
    principal          TEXT    NOT NULL,
    key_id             TEXT    NOT NULL,
    key_type           TEXT    NOT NULL,
    key_fingerprint    TEXT    NOT NULL,
    valid_after        INTEGER  NOT NULL,
    valid_before       INTEGER  NOT NULL,
    certificate_sha256 BLOB   NOT NULL CHECK (length(certificate_sha256) = 32),
    issued_by          TEXT,
    issued_at_us       INTEGER  NOT NULL,
    revoked            BOOLEAN NOT NULL DEFAULT FALSE,
    revoke_reason      TEXT,
    revoked_by         TEXT,
    revoked_at_us      INTEGER,
    version            INTEGER  NOT NULL,
    position           INTEGER  NOT NULL
);
CREATE INDEX ssh_certificates_node ON ssh_certificates (node_id, issued_at_us);
CREATE INDEX ssh_certificates_revoked ON ssh_certificates (revoked, valid_before);
