//! The thread that owns the TPM connection (`tss_esapi::Context`) and runs every TPM command.
//!
//! Transient objects: the EK and the AK are derived for each operation and flushed before it
//! answers; one node key stays loaded between calls (the last one used: signatures come in
//! bursts) and is flushed when another is needed and when the thread ends. At most three objects
//! are loaded at once (AK, EK and the cached node key during an activation), which is what swtpm,
//! with no resource manager, holds.

use std::str::FromStr;

use sha2::{Digest as _, Sha256};
use tss_esapi::abstraction::nv;
use tss_esapi::constants::response_code::Tss2ResponseCodeKind;
use tss_esapi::constants::tss::{TPM2_RH_NULL, TPM2_ST_HASHCHECK};
use tss_esapi::constants::{CapabilityType, SessionType};
use tss_esapi::handles::TpmHandle;
use tss_esapi::handles::{AuthHandle, KeyHandle, NvIndexTpmHandle, ObjectHandle, SessionHandle};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::resource_handles::{Hierarchy, NvAuth};
use tss_esapi::interface_types::session_handles::{AuthSession, PolicySession};
use tss_esapi::structures::{
    Attest, AttestInfo, CapabilityData, Data, Digest, DigestList, EncryptedSecret, HashScheme,
    HashcheckTicket, IdObject, PcrSelectionListBuilder, PcrSlot, Public, SignatureScheme,
    SymmetricDefinition,
};
use tss_esapi::tcti_ldr::TctiNameConf;
use tss_esapi::traits::Marshall;
use tss_esapi::tss2_esys::TPMT_TK_HASHCHECK;
use tss_esapi::Context;

use super::answers::{Certification, DerivedKey, QuoteResult};
use super::convert::{ecc_point, marshal_public, raw_signature};
use super::error::TpmError;
use super::templates::{self, EkKind};

/// How many times a quote is taken again when a PCR changed between it and the PCR read.
const QUOTE_ATTEMPTS: usize = 3;

/// The highest PCR index of the SHA-256 bank a challenge may name.
const MAX_PCR: u32 = 23;

/// A loaded node key: its unique, its handle, its public area as the TPM made it.
struct LoadedNodeKey {
    unique: [u8; 32],
    handle: KeyHandle,
    public: Public,
}

/// The TPM connection and what is loaded in it.
pub(super) struct Worker {
    ctx: Context,
    node: Option<LoadedNodeKey>,
    ek: Option<EkKind>,
}

fn command(operation: &'static str) -> impl FnOnce(tss_esapi::Error) -> TpmError {
    move |e| {
        let hint = match e {
            tss_esapi::Error::Tss2Error(rc)
                if rc.kind() == Some(Tss2ResponseCodeKind::ObjectMemory) =>
            {
                " (the TPM has no free object slot: without a resource manager, objects another \
                 process left loaded stay there; `tpm2_flushcontext -t` flushes them)"
            }
            _ => "",
        };
        TpmError::Command {
            operation,
            reason: format!("{e}{hint}"),
        }
    }
}

impl Worker {
    /// Connects to the TPM at `tcti`.
    pub fn open(tcti: &str) -> Result<Worker, TpmError> {
        let unavailable = |reason: String| TpmError::Unavailable {
            tcti: tcti.to_owned(),
            reason,
        };
        let conf = TctiNameConf::from_str(tcti).map_err(|e| {
            unavailable(format!(
                "not a TCTI bcd knows ({e}): write device:/dev/tpmrm0, \
                 swtpm:host=HOST,port=PORT, mssim:host=HOST,port=PORT or tabrmd"
            ))
        })?;
        let ctx = Context::new(conf).map_err(|e| {
            unavailable(format!(
                "nothing answered there (libtss2: {e}): a device TCTI needs the device present \
                 and readable by this user, a swtpm TCTI a swtpm listening on the port and on \
                 the next one (its control channel)"
            ))
        })?;
        Ok(Worker {
            ctx,
            node: None,
            ek: None,
        })
    }

    fn flush(&mut self, handle: ObjectHandle) -> Result<(), TpmError> {
        self.ctx
            .flush_context(handle)
            .map_err(command("flush_context"))
    }

    /// Derives a primary of `hierarchy` from `template`, runs `f` with it, and flushes it.
    fn with_primary<T>(
        &mut self,
        hierarchy: Hierarchy,
        template: Public,
        operation: &'static str,
        f: impl FnOnce(&mut Worker, KeyHandle, &Public) -> Result<T, TpmError>,
    ) -> Result<T, TpmError> {
        let made = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.create_primary(hierarchy, template, None, None, None, None)
            })
            .map_err(command(operation))?;
        let result = f(self, made.key_handle, &made.out_public);
        let flushed = self.flush(made.key_handle.into());
        let value = result?;
        flushed?;
        Ok(value)
    }

    /// The TPM's random bytes.
    pub fn random(&mut self, len: usize) -> Result<Vec<u8>, TpmError> {
        let digest = self
            .ctx
            .execute_without_session(|ctx| ctx.get_random(len))
            .map_err(command("get_random"))?;
        Ok(digest.value().to_vec())
    }

    /// The AK's TPMT_PUBLIC.
    pub fn ak_public(&mut self) -> Result<Vec<u8>, TpmError> {
        let template = templates::ak_template().map_err(command("ak template"))?;
        self.with_primary(
            Hierarchy::Endorsement,
            template,
            "create_primary (AK)",
            |_, _, public| marshal_public(public),
        )
    }

    /// Whether NV `index` is defined (asked of the capability list, not by touching it: a
    /// missing index would have libtss2 print errors on stderr).
    fn nv_defined(&mut self, index: u32) -> Result<bool, TpmError> {
        let (data, _) = self
            .ctx
            .execute_without_session(|ctx| ctx.get_capability(CapabilityType::Handles, index, 1))
            .map_err(command("get_capability (NV indices)"))?;
        let CapabilityData::Handles(handles) = data else {
            return Ok(false);
        };
        Ok(handles.iter().any(|h| u32::from(*h) == index))
    }

    /// Reads NV `index` whole; `None` when the TPM has no such index.
    fn read_nv(&mut self, index: u32) -> Result<Option<Vec<u8>>, TpmError> {
        if !self.nv_defined(index)? {
            return Ok(None);
        }
        let nv_index = NvIndexTpmHandle::new(index).map_err(command("nv index"))?;
        let object = self
            .ctx
            .execute_without_session(|ctx| ctx.tr_from_tpm_public(TpmHandle::NvIndex(nv_index)))
            .map_err(command("nv_read_public (EK certificate)"))?;
        // read_full closes the ESYS handle of the index when it is done.
        self.ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                nv::read_full(ctx, NvAuth::NvIndex(object.into()), nv_index)
            })
            .map(Some)
            .map_err(command("nv_read (EK certificate)"))
    }

    /// The EK bcd uses and its certificate: `forced` if given, else the first of
    /// [`EkKind::ALL`] whose certificate the TPM holds.
    pub fn ek_certificate(
        &mut self,
        forced: Option<EkKind>,
    ) -> Result<(EkKind, Vec<u8>), TpmError> {
        let kinds: Vec<EkKind> = match forced.or(self.ek) {
            Some(kind) => vec![kind],
            None => EkKind::ALL.to_vec(),
        };
        for kind in &kinds {
            if let Some(cert) = self.read_nv(kind.certificate_index())? {
                if !cert.is_empty() {
                    self.ek = Some(*kind);
                    return Ok((*kind, cert));
                }
            }
        }
        let looked: Vec<String> = kinds
            .iter()
            .map(|k| format!("0x{:08X} ({})", k.certificate_index(), k.label()))
            .collect();
        Err(TpmError::NoEkCertificate(looked.join(", ")))
    }

    /// Forces the EK kind (tests, and a TPM with several certificates).
    pub fn set_ek(&mut self, kind: EkKind) -> Result<(), TpmError> {
        self.ek = None;
        self.ek_certificate(Some(kind))?;
        Ok(())
    }

    fn ek_kind(&mut self) -> Result<EkKind, TpmError> {
        match self.ek {
            Some(kind) => Ok(kind),
            None => Ok(self.ek_certificate(None)?.0),
        }
    }

    /// The EK's TPMT_PUBLIC (derived from its TCG template and flushed).
    pub fn ek_public(&mut self, kind: EkKind) -> Result<Vec<u8>, TpmError> {
        let template = templates::ek_template(kind).map_err(command("ek template"))?;
        self.with_primary(
            Hierarchy::Endorsement,
            template,
            "create_primary (EK)",
            |_, _, public| marshal_public(public),
        )
    }

    /// Derives the node key of `unique` again (always: after TPM2_Clear it is another key) and
    /// keeps it loaded.
    pub fn derive_node_key(&mut self, unique: &[u8; 32]) -> Result<DerivedKey, TpmError> {
        if let Some(old) = self.node.take() {
            // A failure here is an object the TPM already dropped (TPM2_Clear flushes them).
            let _ = self.flush(old.handle.into());
        }
        let template =
            templates::node_key_template(unique).map_err(command("node key template"))?;
        let made = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.create_primary(Hierarchy::Owner, template, None, None, None, None)
            })
            .map_err(command("create_primary (node key)"))?;
        let derived = DerivedKey {
            public_area: marshal_public(&made.out_public)?,
            point: ecc_point(&made.out_public)?,
        };
        self.node = Some(LoadedNodeKey {
            unique: *unique,
            handle: made.key_handle,
            public: made.out_public,
        });
        Ok(derived)
    }

    /// The handle of the node key of `unique` whose TPMT_PUBLIC is `public_area`: the loaded
    /// one, else derived again. A TPM that derives another key from it (cleared) is an error.
    fn node_handle(
        &mut self,
        unique: &[u8; 32],
        public_area: &[u8],
    ) -> Result<KeyHandle, TpmError> {
        if let Some(loaded) = &self.node {
            if &loaded.unique == unique && marshal_public(&loaded.public)? == public_area {
                return Ok(loaded.handle);
            }
        }
        let derived = self.derive_node_key(unique)?;
        if derived.public_area != public_area {
            return Err(TpmError::Command {
                operation: "create_primary (node key)",
                reason: "this TPM derives another key from the node key's record than the one \
                         it was made as (was the TPM cleared or replaced?)"
                    .into(),
            });
        }
        self.node
            .as_ref()
            .map(|n| n.handle)
            .ok_or(TpmError::Stopped)
    }

    /// Flushes the loaded node key when it is the key of `unique`.
    pub fn release(&mut self, unique: &[u8; 32]) -> Result<(), TpmError> {
        if self.node.as_ref().is_some_and(|n| &n.unique == unique) {
            if let Some(old) = self.node.take() {
                // A failure here is an object the TPM already dropped.
                let _ = self.flush(old.handle.into());
            }
        }
        Ok(())
    }

    /// TPM2_Sign (ECDSA-SHA256, NULL ticket) of `digest` with the node key; r || s.
    pub fn sign(
        &mut self,
        unique: &[u8; 32],
        public_area: &[u8],
        digest: &[u8; 32],
    ) -> Result<[u8; 64], TpmError> {
        let mut retried = false;
        loop {
            let handle = self.node_handle(unique, public_area)?;
            let result = self.sign_with(handle, digest);
            match result {
                // The loaded handle went stale (TPM2_Clear, another process's flush): once more.
                Err(_) if !retried => {
                    retried = true;
                    if let Some(old) = self.node.take() {
                        let _ = self.flush(old.handle.into());
                    }
                }
                other => return other,
            }
        }
    }

    fn sign_with(&mut self, handle: KeyHandle, digest: &[u8; 32]) -> Result<[u8; 64], TpmError> {
        let digest = Digest::try_from(digest.to_vec()).map_err(command("sign"))?;
        let ticket = HashcheckTicket::try_from(TPMT_TK_HASHCHECK {
            tag: TPM2_ST_HASHCHECK,
            hierarchy: TPM2_RH_NULL,
            digest: Default::default(),
        })
        .map_err(command("sign"))?;
        let scheme = SignatureScheme::EcDsa {
            hash_scheme: HashScheme::new(HashingAlgorithm::Sha256),
        };
        let signature = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.sign(handle, digest, scheme, ticket)
            })
            .map_err(command("sign"))?;
        raw_signature(&signature)
    }

    /// The AK's TPM2_Certify of the node key, qualified by `qualifying`.
    pub fn certify(
        &mut self,
        unique: &[u8; 32],
        public_area: &[u8],
        qualifying: &[u8; 32],
    ) -> Result<Certification, TpmError> {
        let node = self.node_handle(unique, public_area)?;
        let template = templates::ak_template().map_err(command("ak template"))?;
        self.with_primary(
            Hierarchy::Endorsement,
            template,
            "create_primary (AK)",
            |w, ak, _| w.certify_with(node, ak, qualifying),
        )
    }

    fn certify_with(
        &mut self,
        node: KeyHandle,
        ak: KeyHandle,
        qualifying: &[u8; 32],
    ) -> Result<Certification, TpmError> {
        let data = Data::try_from(qualifying.to_vec()).map_err(command("certify"))?;
        let (attest, signature) = self
            .ctx
            .execute_with_sessions(
                (
                    Some(AuthSession::Password),
                    Some(AuthSession::Password),
                    None,
                ),
                |ctx| ctx.certify(node.into(), ak, data, SignatureScheme::Null),
            )
            .map_err(command("certify"))?;
        Ok(Certification {
            attest: attest.marshall().map_err(command("certify (marshal)"))?,
            signature: signature.marshall().map_err(command("certify (marshal)"))?,
        })
    }

    /// Round 2 without the node key: ActivateCredential of the challenge with the EK and the
    /// AK, then a quote of `pcrs` with extraData `sha256(secret || csr_sha256)`; and, when
    /// `node` is given, the AK's certification of that node key qualified by `csr_sha256`.
    pub fn answer(
        &mut self,
        credential_blob: &[u8],
        encrypted_secret: &[u8],
        pcrs: &[u32],
        csr_sha256: &[u8; 32],
        node: Option<(&[u8; 32], &[u8])>,
    ) -> Result<(Vec<u8>, QuoteResult, Option<Certification>), TpmError> {
        let bad = |what: &str| TpmError::BadChallenge(what.to_owned());
        let blob = IdObject::try_from(credential_blob.to_vec())
            .map_err(|_| bad("its credentialBlob is not a TPM2B_ID_OBJECT's contents"))?;
        let secret = EncryptedSecret::try_from(encrypted_secret.to_vec())
            .map_err(|_| bad("its encryptedSecret is not a TPM2B_ENCRYPTED_SECRET's contents"))?;
        check_pcrs(pcrs)?;
        let kind = self.ek_kind()?;
        // The node key first: if it has to be derived again, it must not be the fourth object.
        let node_handle = match node {
            Some((unique, public_area)) => Some(self.node_handle(unique, public_area)?),
            None => None,
        };
        let template = templates::ak_template().map_err(command("ak template"))?;
        self.with_primary(
            Hierarchy::Endorsement,
            template,
            "create_primary (AK)",
            |w, ak, _| {
                let ek_template = templates::ek_template(kind).map_err(command("ek template"))?;
                let activated = w.with_primary(
                    Hierarchy::Endorsement,
                    ek_template,
                    "create_primary (EK)",
                    |w, ek, _| w.activate(kind, ak, ek, blob, secret),
                )?;
                let mut extra = Sha256::new();
                extra.update(&activated);
                extra.update(csr_sha256);
                let extra: [u8; 32] = extra.finalize().into();
                let quote = w.quote(ak, &extra, pcrs)?;
                let certification = match node_handle {
                    Some(node) => Some(w.certify_with(node, ak, csr_sha256)?),
                    None => None,
                };
                Ok((activated, quote, certification))
            },
        )
    }

    fn activate(
        &mut self,
        kind: EkKind,
        ak: KeyHandle,
        ek: KeyHandle,
        blob: IdObject,
        secret: EncryptedSecret,
    ) -> Result<Vec<u8>, TpmError> {
        let hash = if kind.high_range() {
            HashingAlgorithm::Sha384
        } else {
            HashingAlgorithm::Sha256
        };
        let session = self
            .ctx
            .start_auth_session(
                None,
                None,
                None,
                SessionType::Policy,
                SymmetricDefinition::Null,
                hash,
            )
            .map_err(command("start_auth_session (EK policy)"))?
            .ok_or_else(|| TpmError::Command {
                operation: "start_auth_session (EK policy)",
                reason: "the TPM returned no session".into(),
            })?;
        let result = self.activate_in(kind, session, ak, ek, blob, secret);
        // ActivateCredential ends the policy session unless continueSession is set; a flush of
        // an ended session fails, which is not an error here.
        let _ = self.ctx.flush_context(SessionHandle::from(session).into());
        self.ctx.clear_sessions();
        result
    }

    fn activate_in(
        &mut self,
        kind: EkKind,
        session: AuthSession,
        ak: KeyHandle,
        ek: KeyHandle,
        blob: IdObject,
        secret: EncryptedSecret,
    ) -> Result<Vec<u8>, TpmError> {
        let policy = PolicySession::try_from(session).map_err(command("policy_secret"))?;
        self.ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.policy_secret(
                    policy,
                    AuthHandle::Endorsement,
                    Default::default(),
                    Default::default(),
                    Default::default(),
                    None,
                )
            })
            .map_err(command("policy_secret (endorsement)"))?;
        if kind.high_range() {
            let mut list = DigestList::new();
            for digest in [
                templates::policy_a_sha384(),
                templates::POLICY_C_SHA384.to_vec(),
            ] {
                list.add(Digest::try_from(digest).map_err(command("policy_or"))?)
                    .map_err(command("policy_or"))?;
            }
            self.ctx
                .execute_without_session(|ctx| ctx.policy_or(policy, list))
                .map_err(command("policy_or (EK policy B)"))?;
        }
        let digest = self
            .ctx
            .execute_with_sessions((Some(AuthSession::Password), Some(session), None), |ctx| {
                ctx.activate_credential(ak, ek, blob, secret)
            })
            .map_err(|e| TpmError::Command {
                operation: "activate_credential",
                reason: format!(
                    "{e} (the challenge was not made for this TPM's EK and AK, or was altered)"
                ),
            })?;
        Ok(digest.value().to_vec())
    }

    fn quote(
        &mut self,
        ak: KeyHandle,
        extra: &[u8; 32],
        pcrs: &[u32],
    ) -> Result<QuoteResult, TpmError> {
        let slots: Vec<PcrSlot> = pcrs
            .iter()
            .map(|i| PcrSlot::try_from(1u32 << i).map_err(command("pcr selection")))
            .collect::<Result<_, _>>()?;
        let selection = PcrSelectionListBuilder::new()
            .with_selection(HashingAlgorithm::Sha256, &slots)
            .build()
            .map_err(command("pcr selection"))?;
        for _ in 0..QUOTE_ATTEMPTS {
            let data = Data::try_from(extra.to_vec()).map_err(command("quote"))?;
            let sel = selection.clone();
            let (attest, signature) = self
                .ctx
                .execute_with_session(Some(AuthSession::Password), |ctx| {
                    ctx.quote(ak, data, SignatureScheme::Null, sel)
                })
                .map_err(command("quote"))?;
            let values = self.read_pcrs(&selection)?;
            if quote_digest_matches(&attest, &values) {
                return Ok(QuoteResult {
                    quote: attest.marshall().map_err(command("quote (marshal)"))?,
                    signature: signature.marshall().map_err(command("quote (marshal)"))?,
                    pcrs: values,
                });
            }
        }
        Err(TpmError::Command {
            operation: "quote",
            reason: format!(
                "the PCRs changed between the quote and their read {QUOTE_ATTEMPTS} times in a row"
            ),
        })
    }

    fn read_pcrs(
        &mut self,
        selection: &tss_esapi::structures::PcrSelectionList,
    ) -> Result<Vec<(u32, Vec<u8>)>, TpmError> {
        let data = self
            .ctx
            .execute_without_session(|ctx| {
                tss_esapi::abstraction::pcr::read_all(ctx, selection.clone())
            })
            .map_err(command("pcr_read"))?;
        let Some(bank) = data.pcr_bank(HashingAlgorithm::Sha256) else {
            return Ok(Vec::new());
        };
        Ok(bank
            .into_iter()
            .map(|(slot, digest)| (u32::from(*slot).trailing_zeros(), digest.value().to_vec()))
            .collect())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            let _ = self.ctx.flush_context(node.handle.into());
        }
    }
}

fn check_pcrs(pcrs: &[u32]) -> Result<(), TpmError> {
    if let Some(bad) = pcrs.iter().find(|i| **i > MAX_PCR) {
        return Err(TpmError::BadChallenge(format!(
            "it asks for PCR {bad} (the SHA-256 bank has 0 to {MAX_PCR})"
        )));
    }
    if pcrs.windows(2).any(|w| w[0] >= w[1]) {
        return Err(TpmError::BadChallenge(
            "its PCR list is not strictly ascending".into(),
        ));
    }
    Ok(())
}

fn quote_digest_matches(attest: &Attest, values: &[(u32, Vec<u8>)]) -> bool {
    let AttestInfo::Quote { info } = attest.attested() else {
        return false;
    };
    let mut hash = Sha256::new();
    for (_, value) in values {
        hash.update(value);
    }
    info.pcr_digest().value() == hash.finalize().as_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcr_lists_must_ascend_within_the_bank() {
        assert!(check_pcrs(&[0, 1, 7, 23]).is_ok());
        assert!(check_pcrs(&[]).is_ok());
        assert_eq!(
            check_pcrs(&[24]).unwrap_err().to_string(),
            "the tpm challenge cannot be answered: it asks for PCR 24 (the SHA-256 bank has 0 to 23)"
        );
        assert!(check_pcrs(&[1, 1]).is_err());
        assert!(check_pcrs(&[2, 1]).is_err());
    }
}
