//! bcd's TPM (spec 000 "bcd with its TPM", "The node key in the TPM"; facts measured on this
//! machine: `../shared/research/tpm.md`): the endorsement key and its certificate, the
//! attestation key, credential activation, quotes, node keys that never leave the TPM, and the
//! AK's certification of them, over tss-esapi 7.7 and the TCTI of `config.toml`'s `[tpm] tcti`
//! (`device:/dev/tpmrm0` by default, `swtpm:host=…,port=…` for tests).
//!
//! TPM calls block (1–45 ms each on swtpm): a [`Tpm`] owns one TPM connection on a thread of its
//! own and every method sends that thread a request and waits for its answer, so no TPM call
//! ever runs on the async runtime. `Tpm` is cheap to clone; the thread ends with the last clone.
//!
//! Nothing is persisted in the TPM:
//! - the AK is a primary of the endorsement hierarchy from a fixed template (a restricted P-256
//!   ECDSA-SHA256 signing key), so the same TPM derives the same AK at every load and a renewal
//!   needs no stored handle;
//! - a node key is a primary of the owner hierarchy: an unrestricted P-256 signing key
//!   (fixedTPM, fixedParent, sensitiveDataOrigin, userWithAuth, noDA, sign) derived from a
//!   32-byte unique that `node.key` keeps (PEM block `BCD TPM NODE KEY`).
//!
//! | module | job |
//! | --- | --- |
//! | [`templates`] | the AK, node key and EK templates, the EK policy digests |
//! | `convert` | TPM structures to points, marshalled areas and ES256 signatures |
//! | `worker` | the thread owning the TPM connection: every TPM command, handle flushing |
//! | `no_tpm` | without the `tpm` feature (the fuzz targets' build): a worker that never opens |
//! | [`show`] | `bcd tpm show`: the EK's SHA-256 to allow-list and the AK's statement |
//!
//! The `tpm` feature (default on) brings tss-esapi and libtss2. Without it the API is the same
//! and [`Tpm::open`] answers [`TpmError::Unavailable`]: what builds bcd only for its files
//! (`fuzz/`) does not build the TPM stack.
//!
//! Nothing here ever persists an object in the TPM, lets a node key leave it, or runs a TPM
//! command on the async runtime. Where the node key is made (TPM or file) is
//! [`crate::node_key`]; who may open the TPM under `[helper]` is [`crate::helper`] and
//! `bcd doctor`'s check [`crate::status::tpm_check`].

mod answers;
#[cfg(feature = "tpm")]
mod convert;
mod error;
#[cfg(not(feature = "tpm"))]
mod no_tpm;
pub mod show;
pub mod templates;
#[cfg(feature = "tpm")]
mod worker;

use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::Duration;

pub use domain::attest::tpm::CertifiedKey;
use domain::attest::tpm::TPM_WIRE_VERSION;
use domain::attest::tpm::{PcrValue, TpmAnswer, TpmChallenge, TpmEvidence};
use domain::pki::{NodeSigner, PublicKey, Signature, SignerError};
use sha2::{Digest as _, Sha256};

pub use error::TpmError;
#[cfg(not(feature = "tpm"))]
use no_tpm::Worker;
pub use templates::EkKind;
#[cfg(feature = "tpm")]
use worker::Worker;

/// The TCTI bcd opens when `config.toml` names none.
pub const DEFAULT_TCTI: &str = "device:/dev/tpmrm0";

/// The AK: its TPMT_PUBLIC and its TPM name (`nameAlg || H(public)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestationKey {
    /// TPMT_PUBLIC, marshalled.
    pub public_area: Vec<u8>,
    /// The TPM name: 0x000B followed by SHA-256 of `public_area`.
    pub name: Vec<u8>,
}

impl AttestationKey {
    /// The AK of its TPMT_PUBLIC: the name is computed, as the control plane does.
    pub fn from_public_area(public_area: Vec<u8>) -> AttestationKey {
        let mut name = vec![0x00, 0x0B];
        name.extend(Sha256::digest(&public_area));
        AttestationKey { public_area, name }
    }

    /// The certificate statement naming it: `urn:bc:tpm-ak:<nameAlg hex>:<digest hex>`, e.g.
    /// `urn:bc:tpm-ak:000b:<64 hex>`.
    pub fn statement(&self) -> String {
        let (alg, digest) = self.name.split_at(self.name.len().min(2));
        format!("urn:bc:tpm-ak:{}:{}", hex(alg), hex(digest))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A request to the TPM thread.
type Job = Box<dyn FnOnce(&mut Worker) + Send>;

/// The thread and the way to it; the last [`Tpm`] clone to go drops it, which closes the channel
/// and waits for the thread to flush what it holds (a process must not leave objects loaded in a
/// TPM with no resource manager).
#[derive(Debug)]
struct Inner {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    thread_id: ThreadId,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.jobs.take();
        if thread::current().id() == self.thread_id {
            return;
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A connection to one TPM, served by its own thread.
#[derive(Debug, Clone)]
pub struct Tpm {
    tcti: String,
    inner: Arc<Inner>,
}

impl Tpm {
    /// Opens the TPM at `tcti` (`device:/dev/tpmrm0`, `swtpm:host=127.0.0.1,port=2321`) and
    /// starts its thread.
    pub fn open(tcti: &str) -> Result<Tpm, TpmError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (opened, open_result) = mpsc::sync_channel::<Result<(), TpmError>>(1);
        let name = tcti.to_owned();
        let thread = thread::Builder::new()
            .name("bcd-tpm".into())
            .spawn(move || {
                let mut worker = match Worker::open(&name) {
                    Ok(worker) => {
                        let _ = opened.send(Ok(()));
                        worker
                    }
                    Err(e) => {
                        let _ = opened.send(Err(e));
                        return;
                    }
                };
                while let Ok(job) = queue.recv() {
                    job(&mut worker);
                }
            })
            .map_err(|e| TpmError::Unavailable {
                tcti: tcti.to_owned(),
                reason: format!("no thread for it: {e}"),
            })?;
        let thread_id = thread.thread().id();
        match open_result.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(TpmError::Stopped);
            }
        }
        Ok(Tpm {
            tcti: tcti.to_owned(),
            inner: Arc::new(Inner {
                jobs: Some(jobs),
                thread: Some(thread),
                thread_id,
            }),
        })
    }

    /// The TCTI it was opened with.
    pub fn tcti(&self) -> &str {
        &self.tcti
    }

    /// Runs `f` on the TPM thread and waits for its answer.
    fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Worker) -> Result<T, TpmError> + Send + 'static,
    ) -> Result<T, TpmError> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |worker| {
            let _ = reply.send(f(worker));
        });
        let jobs = self.inner.jobs.as_ref().ok_or(TpmError::Stopped)?;
        jobs.send(job).map_err(|_| TpmError::Stopped)?;
        answer.recv().map_err(|_| TpmError::Stopped)?
    }

    /// Makes a new node key in the TPM (a fresh random unique).
    pub fn create_node_key(&self) -> Result<TpmNodeKey, TpmError> {
        let from_tpm = self.call(|w| w.random(32))?;
        let mut unique = Sha256::new();
        unique.update(system_random()?);
        unique.update(from_tpm);
        self.load_node_key(&unique.finalize().into())
    }

    /// Derives again the node key of `unique` (what `node.key` keeps). After TPM2_Clear the
    /// owner hierarchy derives another key from the same unique: the caller sees a public key
    /// that does not match its certificate.
    pub fn load_node_key(&self, unique: &[u8; 32]) -> Result<TpmNodeKey, TpmError> {
        let record = *unique;
        let derived = self.call(move |w| w.derive_node_key(&record))?;
        let public =
            PublicKey::from_uncompressed_point(&derived.point).map_err(|e| TpmError::Command {
                operation: "create_primary (node key)",
                reason: format!("the TPM made a key that is not a P-256 point: {e}"),
            })?;
        Ok(TpmNodeKey {
            unique: record,
            public,
            public_area: derived.public_area,
            holder: Holder::Local(self.clone()),
        })
    }

    /// The AK (derived, not stored).
    pub fn attestation_key(&self) -> Result<AttestationKey, TpmError> {
        let public_area = self.call(|w| w.ak_public())?;
        Ok(AttestationKey::from_public_area(public_area))
    }

    /// The AK's TPM2_Certify of `key`, qualified by `qualifying` (`sha256(csr)`).
    pub fn certify(
        &self,
        key: &TpmNodeKey,
        qualifying: &[u8; 32],
    ) -> Result<CertifiedKey, TpmError> {
        self.same_tpm(key)?;
        let (unique, public_area, qualifying) = (key.unique, key.public_area.clone(), *qualifying);
        let public = public_area.clone();
        let done = self.call(move |w| w.certify(&unique, &public_area, &qualifying))?;
        Ok(CertifiedKey {
            public,
            certify_info: done.attest,
            signature: done.signature,
        })
    }

    /// Flushes the node key of `unique` when it is the one the TPM thread keeps loaded (nothing
    /// signs with it any more); any other key is left as it is.
    pub fn release(&self, unique: &[u8; 32]) -> Result<(), TpmError> {
        let record = *unique;
        self.call(move |w| w.release(&record))
    }

    /// Uses the EK `kind` (its certificate must be in NV) instead of the first one found, for
    /// this connection's later `join_evidence` and `answer_challenge`.
    pub fn use_ek(&self, kind: EkKind) -> Result<(), TpmError> {
        self.call(move |w| w.set_ek(kind))
    }

    /// Round 1's evidence: the EK's public area, its certificate from NV (RSA-2048 at
    /// 0x01C00002; else P-256 at 0x01C0000A; else P-384 at 0x01C00016), `ek_intermediates`
    /// as given (DER), and the AK's public area.
    pub fn join_evidence(&self, ek_intermediates: &[Vec<u8>]) -> Result<TpmEvidence, TpmError> {
        let (ek_public, ek_certificate, ak_public) = self.call(|w| {
            let (kind, certificate) = w.ek_certificate(None)?;
            let ek_public = w.ek_public(kind)?;
            let ak_public = w.ak_public()?;
            Ok((ek_public, certificate, ak_public))
        })?;
        Ok(TpmEvidence {
            ek_public,
            ek_certificate,
            ek_intermediates: ek_intermediates.to_vec(),
            ak_public,
        })
    }

    /// Round 2's answer to `challenge` for the CSR `csr_sha256`: ActivateCredential with the
    /// EK and AK of the evidence, a quote of the challenge's PCRs with extraData
    /// `sha256(secret || csr_sha256)`, and, when `node_key` is given, the AK's certification of
    /// it qualified by `csr_sha256`.
    pub fn answer_challenge(
        &self,
        challenge: &TpmChallenge,
        csr_sha256: &[u8; 32],
        node_key: Option<&TpmNodeKey>,
    ) -> Result<TpmAnswer, TpmError> {
        if challenge.v != TPM_WIRE_VERSION {
            return Err(TpmError::BadChallenge(format!(
                "it is version {} (bcd answers version {TPM_WIRE_VERSION})",
                challenge.v
            )));
        }
        if let Some(key) = node_key {
            self.same_tpm(key)?;
        }
        let node = node_key.map(|k| (k.unique, k.public_area.clone()));
        let node_public = node_key.map(|k| k.public_area.clone());
        let (blob, secret, pcrs, csr) = (
            challenge.credential_blob.clone(),
            challenge.encrypted_secret.clone(),
            challenge.pcrs.clone(),
            *csr_sha256,
        );
        let (activated, quote, certification) = self.call(move |w| {
            let node = node.as_ref().map(|(u, p)| (u, p.as_slice()));
            w.answer(&blob, &secret, &pcrs, &csr, node)
        })?;
        Ok(TpmAnswer {
            state: challenge.state.clone(),
            secret: activated,
            quote: quote.quote,
            quote_signature: quote.signature,
            pcr_values: quote
                .pcrs
                .into_iter()
                .map(|(index, digest)| PcrValue { index, digest })
                .collect(),
            node_key: match (certification, node_public) {
                (Some(c), Some(public)) => Some(CertifiedKey {
                    public,
                    certify_info: c.attest,
                    signature: c.signature,
                }),
                _ => None,
            },
        })
    }

    fn same_tpm(&self, key: &TpmNodeKey) -> Result<(), TpmError> {
        if matches!(&key.holder, Holder::Local(tpm) if Arc::ptr_eq(&self.inner, &tpm.inner)) {
            Ok(())
        } else {
            Err(TpmError::BadChallenge(
                "the node key belongs to another TPM connection than the AK's".into(),
            ))
        }
    }
}

/// 32 bytes of the kernel's random generator (mixed with the TPM's for a node key's unique).
pub(crate) fn system_random() -> Result<[u8; 32], TpmError> {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| TpmError::Command {
            operation: "random",
            reason: format!("reading /dev/urandom: {e}"),
        })?;
    Ok(bytes)
}

/// A node key held by a TPM this process does not open: `bcd helper`'s, for an unprivileged
/// `bcd node` (`crate::helper::keys` implements it and checks every answer).
pub trait RemoteKeys: Send + Sync + std::fmt::Debug {
    /// The ES256 signature of `message` (the holder signs its SHA-256) by the key of `unique`,
    /// verified against `public`.
    fn sign_message(
        &self,
        unique: &[u8; 32],
        public: &PublicKey,
        message: &[u8],
    ) -> Result<Signature, SignerError>;

    /// Asks the holder to unload the key of `unique` after `delay` (in the background).
    fn release_after(&self, unique: [u8; 32], delay: Duration);
}

/// Who holds a node key: this process's own TPM connection, or a remote holder.
#[derive(Debug, Clone)]
enum Holder {
    Local(Tpm),
    Remote(Arc<dyn RemoteKeys>),
}

/// A node key in the TPM: its unique, its public halves, and who derives it (this process's
/// TPM, or `bcd helper` for an unprivileged node).
#[derive(Debug, Clone)]
pub struct TpmNodeKey {
    unique: [u8; 32],
    public: PublicKey,
    public_area: Vec<u8>,
    holder: Holder,
}

impl TpmNodeKey {
    /// A key `remote` holds, whose answers were checked: the TPMT_PUBLIC has the node-key
    /// attributes and `public` is its point.
    pub fn remote(
        unique: [u8; 32],
        public: PublicKey,
        public_area: Vec<u8>,
        remote: Arc<dyn RemoteKeys>,
    ) -> TpmNodeKey {
        TpmNodeKey {
            unique,
            public,
            public_area,
            holder: Holder::Remote(remote),
        }
    }

    /// The 32-byte unique it is derived from (`node.key`'s record).
    pub fn unique(&self) -> &[u8; 32] {
        &self.unique
    }

    /// Its TPMT_PUBLIC, marshalled (what a certification names).
    pub fn public_area(&self) -> &[u8] {
        &self.public_area
    }

    /// The TPM holding it, when this process opened it itself (`None` through `bcd helper`).
    pub fn tpm(&self) -> Option<&Tpm> {
        match &self.holder {
            Holder::Local(tpm) => Some(tpm),
            Holder::Remote(_) => None,
        }
    }

    /// Whether `bcd helper` (or another remote holder) holds it.
    pub fn is_remote(&self) -> bool {
        matches!(self.holder, Holder::Remote(_))
    }

    /// TPM2_Sign of a SHA-256 `digest`, r‖s, by this process's TPM (what `bcd helper` serves).
    pub fn sign_digest(&self, digest: &[u8; 32]) -> Result<[u8; 64], TpmError> {
        let (unique, public_area, digest) = (self.unique, self.public_area.clone(), *digest);
        match &self.holder {
            Holder::Local(tpm) => tpm.call(move |w| w.sign(&unique, &public_area, &digest)),
            Holder::Remote(_) => Err(TpmError::Helper(
                "a key held by bcd helper signs messages, not digests".into(),
            )),
        }
    }

    /// Unloads it after `delay` when a remote holder holds it (the renewal that replaced it
    /// is done); a key of this process's own TPM is flushed when the next one is loaded.
    pub fn release_after(&self, delay: Duration) {
        if let Holder::Remote(remote) = &self.holder {
            remote.release_after(self.unique, delay);
        }
    }
}

impl NodeSigner for TpmNodeKey {
    fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// TPM2_Sign (ECDSA) over SHA-256 of `message`, hashed here.
    fn sign_es256(&self, message: &[u8]) -> Result<Signature, SignerError> {
        match &self.holder {
            Holder::Remote(remote) => remote.sign_message(&self.unique, &self.public, message),
            Holder::Local(_) => {
                let digest: [u8; 32] = Sha256::digest(message).into();
                let raw = self
                    .sign_digest(&digest)
                    .map_err(|e| SignerError(e.to_string()))?;
                Signature::from_bytes(&raw)
                    .ok_or_else(|| SignerError("a signature of another size".into()))
            }
        }
    }
}
