//! `acme-asset`: an example of an attestor written in Rust and run in process (spec 001 "The
//! contract", "Registering"). A machine proves it is a known asset with a tag its vendor signed
//! together with this join's CSR SHA-256; the attestor looks the tag up in its operator-managed
//! list of assets ([`ASSET_LIST`], on the generic attestor entries: `bcctl attestor entry add
//! --list acme-asset --key ASSET-0042 --tenant T --site S --pool P`), and binds the node to the
//! asset for good.
//!
//! Configuration (`[attestors.acme-asset]`, [`AcmeAssetConfig`], parsed here):
//!
//! ```toml
//! [attestors.acme-asset]
//! vendor_key = "<base64url of the uncompressed P-256 point, 65 bytes>"
//! ```
//!
//! Evidence (`JoinRequest.attestation`): UTF-8 JSON
//! `{"assetTag":"ASSET-0042","csrSha256":"<b64url>","sig":"<b64url r||s>"}`, base64url without
//! padding; `sig` is ES256 (P-256, SHA-256, fixed r||s) by the vendor key over
//! `lp("acme-asset") || lp(asset tag) || lp(csr_sha256)` ([`signed_input`]; `lp` is a 4-byte
//! big-endian length, then the bytes).
//!
//! | check | refusal |
//! | --- | --- |
//! | evidence is that JSON, fields well typed | `acme-asset:malformed` |
//! | `csrSha256` present | `acme-asset:no-csr-binding` |
//! | `csrSha256` is this request's CSR's | `acme-asset:csr-mismatch` |
//! | vendor signature verifies | `acme-asset:bad-signature` |
//! | the tag has an active entry in the `acme-asset` list | `acme-asset:unknown-asset` |
//! | this proof not used before | `acme-asset:reused` |
//! | role `node` (the registry's check) | `acme-asset:wrong-role` |
//!
//! The result: the entry's tenant, site and pool; `bind` = SHA-256 of the asset tag (one node
//! per asset); one single-use subject, SHA-256 of the signed input, kept forever; and, when the
//! asset is already bound to a node, that node is reclaimed in place (a reinstalled machine comes
//! back as itself). No token, no node-key statement.
//!
//! Register it at start with its factory, one line:
//! `registry.register_factory(&acme_asset::FACTORY, config.get("acme-asset"))?`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use domain::attest::{
    built, AttestRequest, AttestationResult, Attestor, AttestorFactory, AttestorRefusal,
    AttestorSetup, Built, EntryList, FactKey, Facts, NodeKeyStatement, Planned, SingleUse, Verdict,
};
use domain::pki::NodeRole;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The attestor id.
pub const ID: &str = "acme-asset";

/// The purpose label of the vendor's signature.
pub const PURPOSE: &str = "acme-asset";

const ROLES: &[NodeRole] = &[NodeRole::Node];

/// The operator-managed list of assets: key the asset tag, the entry where it belongs. The
/// generic rules ([`EntryList::generic`]), so `bcctl attestor entry` needs nothing of this crate.
pub const ASSET_LIST: EntryList = EntryList::generic(ID);

/// How `acme-asset` registers: its list, and the attestor built from `[attestors.acme-asset]`
/// (not registered without the table).
pub const FACTORY: AttestorFactory = AttestorFactory {
    id: ID,
    lists: &[ASSET_LIST],
    build: build_from_table,
};

/// `[attestors.acme-asset]` as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeAssetConfig {
    /// The vendor's key: base64url (no padding) of the uncompressed P-256 point.
    pub vendor_key: String,
}

fn build_from_table(setup: &AttestorSetup<'_>) -> Built {
    let Some(table) = setup.table else {
        return Ok(None);
    };
    let config: AcmeAssetConfig =
        serde_json::from_value(table.clone()).map_err(|e| format!("[attestors.{ID}]: {e}"))?;
    let key = URL_SAFE_NO_PAD
        .decode(&config.vendor_key)
        .map_err(|e| format!("[attestors.{ID}] vendor_key: {e}"))?;
    let attestor =
        AcmeAssetAttestor::new(key).map_err(|e| format!("[attestors.{ID}] vendor_key: {e}"))?;
    built(attestor)
}

/// Why the attestor could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcmeAssetError {
    /// The vendor key is not an uncompressed SEC1 P-256 point (65 bytes, `0x04 || x || y`).
    BadVendorKey,
}

impl std::fmt::Display for AcmeAssetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcmeAssetError::BadVendorKey => {
                f.write_str("the vendor key must be an uncompressed P-256 point (65 bytes)")
            }
        }
    }
}

impl std::error::Error for AcmeAssetError {}

/// The asset-tag attestor.
#[derive(Debug, Clone)]
pub struct AcmeAssetAttestor {
    vendor_key: Vec<u8>,
}

/// `lp(PURPOSE) || lp(asset tag) || lp(csr_sha256)`: what the vendor signs.
pub fn signed_input(asset_tag: &str, csr_sha256: &[u8; 32]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in [PURPOSE.as_bytes(), asset_tag.as_bytes(), csr_sha256] {
        out.extend_from_slice(&(part.len() as u32).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// SHA-256 of the asset tag: the subject a node is bound by.
pub fn asset_subject(asset_tag: &str) -> [u8; 32] {
    Sha256::digest(asset_tag.as_bytes()).into()
}

/// The evidence as sent.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Evidence {
    asset_tag: String,
    csr_sha256: Option<String>,
    sig: String,
}

/// The evidence, decoded once by [`AcmeAssetAttestor::plan`] and handed to `verify` as its plan.
pub struct Parsed {
    asset_tag: String,
    signed: Vec<u8>,
}

fn refuse(reason: &str) -> AttestorRefusal {
    AttestorRefusal::new(ID, reason)
}

impl AcmeAssetAttestor {
    /// An attestor trusting `vendor_key` (uncompressed SEC1 P-256).
    pub fn new(vendor_key: Vec<u8>) -> Result<Self, AcmeAssetError> {
        if vendor_key.len() != 65 || vendor_key[0] != 4 {
            return Err(AcmeAssetError::BadVendorKey);
        }
        Ok(AcmeAssetAttestor { vendor_key })
    }

    fn parse(&self, request: &AttestRequest<'_>) -> Result<Parsed, AttestorRefusal> {
        let evidence: Evidence =
            serde_json::from_slice(request.evidence).map_err(|_| refuse("malformed"))?;
        let sig = URL_SAFE_NO_PAD
            .decode(&evidence.sig)
            .map_err(|_| refuse("malformed"))?;
        if evidence.asset_tag.is_empty() || evidence.asset_tag.len() > 256 || sig.len() != 64 {
            return Err(refuse("malformed"));
        }
        let bound = evidence
            .csr_sha256
            .ok_or_else(|| refuse("no-csr-binding"))?;
        let bound = URL_SAFE_NO_PAD
            .decode(bound)
            .map_err(|_| refuse("malformed"))?;
        let csr_sha256 = request.csr.sha256();
        if bound.as_slice() != csr_sha256.as_slice() {
            return Err(refuse("csr-mismatch"));
        }
        let signed = signed_input(&evidence.asset_tag, csr_sha256);
        let key = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            &self.vendor_key,
        );
        key.verify(&signed, &sig)
            .map_err(|_| refuse("bad-signature"))?;
        Ok(Parsed {
            asset_tag: evidence.asset_tag,
            signed,
        })
    }

    /// The single-use subject of a proof: SHA-256 of the signed input (the signature is over
    /// it, so one proof has one subject whatever its encoding).
    fn proof_subject(parsed: &Parsed) -> [u8; 32] {
        Sha256::digest(&parsed.signed).into()
    }
}

impl Attestor for AcmeAssetAttestor {
    type Plan = Parsed;

    fn id(&self) -> &str {
        ID
    }

    fn roles(&self) -> &[NodeRole] {
        ROLES
    }

    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<Parsed>, AttestorRefusal> {
        let parsed = self.parse(request)?;
        let keys = vec![
            FactKey::Use {
                attestor: ID.to_owned(),
                subject: Self::proof_subject(&parsed),
            },
            FactKey::Binding(asset_subject(&parsed.asset_tag)),
            FactKey::entry(&ASSET_LIST, &parsed.asset_tag),
        ];
        Ok(Planned::new(keys, parsed))
    }

    fn verify(&self, request: &AttestRequest<'_>, parsed: &Parsed, facts: &Facts) -> Verdict {
        let Some(asset) = facts.entry(&ASSET_LIST, &parsed.asset_tag) else {
            return Verdict::Refuse(refuse("unknown-asset"));
        };
        let proof = Self::proof_subject(parsed);
        if facts.used(ID, &proof) {
            // Naming the spent subject lets the JoinService answer this same request again
            // when the join that spent it was its own (the answer was lost).
            let refusal = refuse("reused").in_tenant(&asset.tenant_id);
            return Verdict::Refuse(refusal.spent(ID, &proof));
        }
        let bind = asset_subject(&parsed.asset_tag);
        // Bound already (by this attestor): the same machine again, reinstalled or with a lost
        // key, so it comes back as that node. The admission step checks the node keeps its
        // tenant, site, pool and role.
        let reclaim_node_id = facts
            .bindings
            .get(&bind)
            .filter(|b| b.attestor == ID)
            .map(|b| b.node_id.clone());
        Verdict::Admit(Box::new(AttestationResult {
            tenant_id: asset.tenant_id.clone(),
            role: request.role,
            site_id: asset.site_id.clone(),
            pool_id: asset.pool_id.clone(),
            reclaim_node_id,
            token: None,
            bind: vec![bind],
            single_use: vec![SingleUse {
                attestor: ID.to_owned(),
                subject: proof,
                expires_at_us: None,
                reason_if_used: "reused".into(),
            }],
            node_key: NodeKeyStatement::Unattested,
            allowed_kinds: Vec::new(),
            approval: None,
        }))
    }
}

/// The vendor's side, for tests and tooling: the evidence for `asset_tag` and this CSR, signed
/// by `vendor` (a P-256 key pair).
pub fn vendor_evidence(
    vendor: &ring::signature::EcdsaKeyPair,
    asset_tag: &str,
    csr_sha256: &[u8; 32],
) -> Result<Vec<u8>, ring::error::Unspecified> {
    let rng = ring::rand::SystemRandom::new();
    let sig = vendor.sign(&rng, &signed_input(asset_tag, csr_sha256))?;
    let body = serde_json::json!({
        "assetTag": asset_tag,
        "csrSha256": URL_SAFE_NO_PAD.encode(csr_sha256),
        "sig": URL_SAFE_NO_PAD.encode(sig.as_ref()),
    });
    Ok(body.to_string().into_bytes())
}

#[cfg(test)]
mod tests;
