//! The trust bundle a Welcome carries: the published `trust_bundle_state` row, wrapped with its
//! version and trust domain in a `bc.wire.v1.TrustBundle` and signed by the JoinService signing
//! key (purpose `trust-bundle`). Only a process holding that key (`--role all` or `api`) builds
//! one; a split gateway asks the api for it and relays it unchanged.

use std::sync::Arc;

use commands::quorum::read_published_content;
use domain::pki::statement::{sign, TrustBundleStatement};
use domain::pki::KeySet;
use events::store::EventStore;
use prost::Message;

/// The trust bundle part of a Welcome: the published version and its signed bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WelcomeTrust {
    /// 0 when nothing is published.
    pub version: u64,
    /// An encoded `bc.wire.v1.TrustBundle` (empty when nothing is published).
    pub bundle: Vec<u8>,
    /// ES256 `r || s` over `TrustBundleStatement { trust_domain, bundle }`.
    pub signature: Vec<u8>,
}

/// Reads the published bundle and signs it (no cache: callers cache).
pub struct TrustSigner {
    store: EventStore,
    keys: Arc<KeySet>,
}

impl TrustSigner {
    pub fn new(store: EventStore, keys: Arc<KeySet>) -> Self {
        TrustSigner { store, keys }
    }

    /// The bundle to put in a Welcome; version 0 and empty when none is published.
    pub async fn current(&self) -> Result<WelcomeTrust, String> {
        let Some(row) = read_published_content(&self.store)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(WelcomeTrust::default());
        };
        let version = row.version;
        let bundle = proto::TrustBundle {
            version,
            trust_domain: self.keys.trust_domain.to_string(),
            content: row.content,
        }
        .encode_to_vec();
        let signature = sign(
            &self.keys.join_signing,
            &TrustBundleStatement {
                trust_domain: self.keys.trust_domain.as_str(),
                bundle: &bundle,
            },
        )
        .map_err(|e| format!("signing the trust bundle: {e}"))?;
        Ok(WelcomeTrust {
            version,
            bundle,
            signature: signature.as_bytes().to_vec(),
        })
    }
}
