//! The node CA's revocation list signed from the revocation projection, for whoever holds the
//! node CA key: `bcctl pki crl`, the gateway of the `all` role and the api process (which signs
//! for split gateways); issue 41 item 4, docs/decisions/0088 and 0090.
//!
//! It reads the log's head position first, then every node certificate revoked and not yet
//! expired (`projections::identity::read::crl_entries`), and lets `domain::pki::crl` sign them.
//! It decides nothing and writes nothing: the list is a derived artefact, rebuilt at will.

use domain::pki::{
    sign_crl, CrlError, CrlNumber, CrlRequest, NodeCa, RevokedEntry, Serial, SignedCrl,
};
use events::store::{EventStore, LogStore, StoreError};
use time::{Duration, OffsetDateTime};

/// Why a list could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum CrlSignError {
    /// The store could not be read.
    #[error("reading the revoked certificates: {0}")]
    Store(#[from] StoreError),
    /// A `node_certs` row that is not a certificate's (a damaged projection).
    #[error(
        "node_certs holds {what} for serial {serial:?}; rebuild the projections (bcctl rebuild)"
    )]
    Damaged {
        /// What is wrong.
        what: &'static str,
        /// The row's serial.
        serial: String,
    },
    /// The signing itself.
    #[error(transparent)]
    Sign(#[from] CrlError),
}

/// What was signed, and the log position the entries were read at.
#[derive(Debug, Clone)]
pub struct CurrentCrl {
    /// The list.
    pub signed: SignedCrl,
    /// The log's head when the entries were read.
    pub log_position: i64,
}

/// The projection's rows as list entries.
fn entries(
    rows: Vec<projections::identity::read::CrlEntryRow>,
) -> Result<Vec<RevokedEntry>, CrlSignError> {
    rows.into_iter()
        .map(|row| {
            let damaged = |what| CrlSignError::Damaged {
                what,
                serial: row.serial.clone(),
            };
            let bytes =
                hex::decode(&row.serial).map_err(|_| damaged("a serial that is not hex"))?;
            let serial = Serial::from_be_bytes(&bytes).map_err(|_| damaged("an invalid serial"))?;
            let revoked_at =
                OffsetDateTime::from_unix_timestamp_nanos(i128::from(row.revoked_at_us) * 1_000)
                    .map_err(|_| damaged("a revocation time out of range"))?;
            Ok(RevokedEntry { serial, revoked_at })
        })
        .collect()
}

/// Signs the node CA's list as of now: the head first, then the entries, so the list holds at
/// least every revocation up to its number's position; the number at least `floor + 1`.
pub async fn sign_current(
    store: &EventStore,
    node_ca: &NodeCa,
    floor: Option<CrlNumber>,
    next_update_in: Duration,
    now: OffsetDateTime,
) -> Result<CurrentCrl, CrlSignError> {
    let log_position = store.head_position().await?;
    let now_us = i64::try_from(now.unix_timestamp_nanos() / 1_000).unwrap_or(i64::MAX);
    let rows = projections::identity::read::crl_entries(store, now_us).await?;
    let request = CrlRequest {
        entries: entries(rows)?,
        log_position,
        floor,
        next_update_in,
    };
    let signed = sign_crl(node_ca, request, now)?;
    Ok(CurrentCrl {
        signed,
        log_position,
    })
}
