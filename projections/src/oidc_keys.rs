//! `oidc_keys` (issue 43): the OIDC issuer's signing keys, from the `oidc-issuer` stream's
//! `oidc.key_added`, `oidc.key_promoted` and `oidc.key_retired`
//! (`events/proto/bc/events/v1/oidc.proto`), and the reads of it: the keys for a decision, the
//! published ones for the JWK Set, the one that signs. Applied inline by `commands::oidc` and by
//! every rebuild (`commands::every_projection`).
//!
//! Key events are rare (an operator's command each), so each is one or two statements, their
//! row counts checked: an event that names a key in the wrong state is inapplicable (the
//! command layer never writes one).

use events::schema::{OidcKeyAdded, OidcKeyPromoted, OidcKeyRetired};
use events::store::{LogTx, StoreError, StoreTx};
use events::{EventPayload, RecordedEvent};

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `oidc_keys`.
pub struct OidcKeys;

const NAME: &str = "oidc_keys";

const OIDC_TABLES: &[TableSpec] = &[TableSpec {
    name: NAME,
    columns: &[
        "kid",
        "public_key_spki",
        "sealed_private_key",
        "state",
        "added_at_us",
        "promoted_at_us",
        "stopped_at_us",
        "retired_at_us",
        "version",
        "position",
    ],
    order_by: "kid",
}];

fn inapplicable(e: &RecordedEvent, why: &str) -> ProjectionError {
    ProjectionError::Inapplicable {
        projection: NAME,
        position: e.position,
        event_type: e.event_type.clone(),
        why: why.to_owned(),
    }
}

const ADD: &str = "INSERT INTO oidc_keys (kid, public_key_spki, sealed_private_key, state, \
     added_at_us, promoted_at_us, stopped_at_us, retired_at_us, version, position) \
     VALUES ($1, $2, $3, 'added', $4, NULL, NULL, NULL, $5, $6) ON CONFLICT (kid) DO NOTHING";

const STOP: &str = "UPDATE oidc_keys SET state = 'stopped', stopped_at_us = $1, version = $2, \
     position = $3 WHERE state = 'signing'";

const PROMOTE: &str = "UPDATE oidc_keys SET state = 'signing', promoted_at_us = $2, \
     stopped_at_us = NULL, version = $3, position = $4 \
     WHERE kid = $1 AND state IN ('added', 'stopped')";

const RETIRE: &str = "UPDATE oidc_keys SET state = 'retired', retired_at_us = $2, version = $3, \
     position = $4 WHERE kid = $1 AND state IN ('added', 'stopped')";

async fn apply_one(tx: &mut StoreTx, e: &RecordedEvent) -> Result<(), ProjectionError> {
    let (at, version, position) = (e.occurred_at_us, e.stream_version, e.position);
    match e.event_type.as_str() {
        OidcKeyAdded::EVENT_TYPE => {
            let p: OidcKeyAdded = e.decode()?;
            let args = [
                p.kid.into(),
                p.public_key_spki.into(),
                p.sealed_private_key.into(),
                at.into(),
                version.into(),
                position.into(),
            ];
            if tx.execute(ADD, &args).await? != 1 {
                return Err(inapplicable(e, "the key was added already"));
            }
        }
        OidcKeyPromoted::EVENT_TYPE => {
            let p: OidcKeyPromoted = e.decode()?;
            let stopped = tx
                .execute(STOP, &[at.into(), version.into(), position.into()])
                .await?;
            if stopped != u64::from(!p.previous_kid.is_empty()) {
                return Err(inapplicable(e, "the key that signed is not the one named"));
            }
            let args = [p.kid.into(), at.into(), version.into(), position.into()];
            if tx.execute(PROMOTE, &args).await? != 1 {
                return Err(inapplicable(e, "no such key that does not sign"));
            }
        }
        OidcKeyRetired::EVENT_TYPE => {
            let p: OidcKeyRetired = e.decode()?;
            let args = [p.kid.into(), at.into(), version.into(), position.into()];
            if tx.execute(RETIRE, &args).await? != 1 {
                return Err(inapplicable(
                    e,
                    "no such key that is not signing or retired",
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

impl Projection for OidcKeys {
    fn name(&self) -> &'static str {
        NAME
    }
    fn tables(&self) -> &'static [TableSpec] {
        OIDC_TABLES
    }
    // Not only writes: each statement's row count is read.
    fn handles(&self, event_type: &str) -> bool {
        [
            OidcKeyAdded::EVENT_TYPE,
            OidcKeyPromoted::EVENT_TYPE,
            OidcKeyRetired::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for e in events {
                apply_one(tx, e).await?;
            }
            Ok(())
        })
    }
}

crate::from_row! {
    /// An `oidc_keys` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct OidcKeyRow {
        pub kid: String,
        pub public_key_spki: Vec<u8>,
        pub sealed_private_key: Vec<u8>,
        pub state: String,
        pub added_at_us: i64,
        pub promoted_at_us: Option<i64>,
        pub stopped_at_us: Option<i64>,
        pub retired_at_us: Option<i64>,
        pub version: i64,
        pub position: i64,
    }
}

const COLUMNS: &str = "kid, public_key_spki, sealed_private_key, state, added_at_us, \
     promoted_at_us, stopped_at_us, retired_at_us, version, position";

/// Every key, in the order they were added (retired ones included).
pub async fn oidc_key_rows(tx: &mut StoreTx) -> Result<Vec<OidcKeyRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM oidc_keys ORDER BY added_at_us, kid");
    tx.fetch_all(&sql, &[]).await
}

/// The key that signs, if one does.
pub async fn signing_key_row(tx: &mut StoreTx) -> Result<Option<OidcKeyRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM oidc_keys WHERE state = 'signing'");
    tx.fetch_optional(&sql, &[]).await
}

/// The published keys (not retired) as `(kid, SPKI DER)`, in the order they were added: what
/// the JWK Set holds.
pub async fn published_keys(tx: &mut StoreTx) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    tx.fetch_all(PUBLISHED, &[]).await
}

const PUBLISHED: &str = "SELECT kid, public_key_spki FROM oidc_keys WHERE state <> 'retired' \
     ORDER BY added_at_us, kid";

/// [`published_keys`] read outside a transaction (the gateway, per JWK Set request).
pub async fn published_keys_in(
    store: &events::store::EventStore,
) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    store.fetch_all(PUBLISHED, &[]).await
}

/// [`signing_key_row`] read outside a transaction (an api replica checking for a promotion).
pub async fn signing_key_row_in(
    store: &events::store::EventStore,
) -> Result<Option<OidcKeyRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM oidc_keys WHERE state = 'signing'");
    store.fetch_optional(&sql, &[]).await
}
