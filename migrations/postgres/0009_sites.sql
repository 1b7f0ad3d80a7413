-- Step 9, sites (issue 20): sites and their boot entries (stream site/<id>; the site row's
-- version is the stream's, so one active entry per MAC is guarded by appending at the version
-- read), each site's boot lease (stream lease/site:<id>:boot), and the boot entry a discovery
-- token was minted for.

CREATE TABLE sites (
    site_id         TEXT   PRIMARY KEY,
    tenant_id       TEXT   NOT NULL,
    description     TEXT   NOT NULL,
    default_pool_id TEXT,
    created_by      TEXT   NOT NULL,
    created_at_us   BIGINT NOT NULL,
    updated_at_us   BIGINT NOT NULL,
    version         BIGINT NOT NULL,
    position        BIGINT NOT NULL
);
CREATE INDEX sites_tenant ON sites (tenant_id, site_id);

CREATE TABLE boot_entries (
    entry_id      TEXT    PRIMARY KEY,
    site_id       TEXT    NOT NULL,
    tenant_id     TEXT    NOT NULL,
    mac           TEXT    NOT NULL,
    product_uuid  TEXT,
    kernel_url    TEXT    NOT NULL,
    initrd_url    TEXT    NOT NULL,
    kernel_args   TEXT    NOT NULL,
    pool_id       TEXT    NOT NULL,
    not_after_us  BIGINT  NOT NULL,
    added_by      TEXT    NOT NULL,
    removed       BOOLEAN NOT NULL DEFAULT FALSE,
    removed_by    TEXT,
    remove_reason TEXT,
    created_at_us BIGINT  NOT NULL,
    updated_at_us BIGINT  NOT NULL,
    version       BIGINT  NOT NULL,
    position      BIGINT  NOT NULL
);
CREATE INDEX boot_entries_site_mac ON boot_entries (site_id, mac, removed);

CREATE TABLE site_leases (
    site_id        TEXT    PRIMARY KEY,
    lease          TEXT    NOT NULL,
    holder_node_id TEXT    NOT NULL,
    epoch          BIGINT  NOT NULL CHECK (epoch >= 1),
    expires_at_us  BIGINT  NOT NULL,
    released       BOOLEAN NOT NULL,
    release_cause  TEXT,
    acquired_at_us BIGINT  NOT NULL,
    updated_at_us  BIGINT  NOT NULL,
    version        BIGINT  NOT NULL,
    position       BIGINT  NOT NULL
);

ALTER TABLE join_tokens ADD COLUMN boot_entry_id TEXT;
