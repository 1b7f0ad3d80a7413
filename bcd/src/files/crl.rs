//! `crl.pem`: the node CA's revocation list as the gateway last pushed it over the session
//! (`GatewayMessage.revocation_list`), so a relying party on the machine (nginx's `ssl_crl`,
//! `openssl verify -CRLfile`) reads a local file (issue 41 item 4; docs/decisions/0090).
//!
//! A pushed list is not taken on the gateway's word: it is written only when a node CA
//! certificate of the identity's chain signed it (issuer and signature, `domain::pki::verify_crl`)
//! and its CRL number is above the number of the list held (a held file this node CA does not
//! verify counts as none). A refused list is logged and the held file stays.
//!
//! The file is PEM (`X509 CRL`), `[files] crl` (default `crl.pem` in the data directory) with
//! `[files] mode`, replaced as every PEM file is (temporary file, fsync, rename, directory
//! fsync), and `[files] on_renew` runs after it, with `BCD_CRL_FILE` and `BCD_CRL_NUMBER` added
//! to its environment: the command that reloads nginx after a renewal reloads its list too.

use std::collections::BTreeMap;

use domain::pki::{read_pem_blocks, verify_crl, CrlCheckError, CrlFacts, CrlNumber};

pub use crate::files::pem_files::CRL_PEM;
use crate::files::pem_files::{hook_env, run_hook, FileSettings};
use crate::files::{identity::LoadedIdentity, pem_encode, write_atomic_mode, FileError};

/// Largest held list read back (a list of 100,000 certificates is about 4 MiB of DER).
const MAX_CRL_FILE: u64 = 16 * 1024 * 1024;

/// Why a pushed list was not written.
#[derive(Debug, thiserror::Error)]
pub enum CrlRefusal {
    /// No node CA certificate of the identity signed it.
    #[error(
        "refused the gateway's revocation list: {0} (the node CA this node holds did not sign it)"
    )]
    NotTheNodeCa(CrlCheckError),
    /// Its number is not above the held list's.
    #[error(
        "refused the gateway's revocation list numbered {got}: not above the held list's {held}; \
         keeping {path}"
    )]
    NotRising {
        /// The pushed list's number.
        got: CrlNumber,
        /// The held list's.
        held: CrlNumber,
        /// The held file.
        path: String,
    },
    /// The file could not be written.
    #[error("the revocation list was not written: {0}")]
    File(#[from] FileError),
}

/// The list written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCrl {
    /// Its number.
    pub number: CrlNumber,
    /// How many certificates it lists.
    pub revoked: usize,
}

/// The list checked against every CA certificate of `ca_chain` (the identity's chain after the
/// leaf): the first that verifies it, or the first refusal.
fn check(ca_chain: &[Vec<u8>], der: &[u8]) -> Result<CrlFacts, CrlCheckError> {
    let mut first = CrlCheckError::OtherIssuer;
    for (i, ca) in ca_chain.iter().enumerate() {
        match verify_crl(ca, der) {
            Ok(facts) => return Ok(facts),
            Err(e) if i == 0 => first = e,
            Err(_) => {}
        }
    }
    Err(first)
}

/// The number of the list held at `settings.crl`, when this node CA verifies it.
fn held(settings: &FileSettings, ca_chain: &[Vec<u8>]) -> Option<CrlNumber> {
    let meta = std::fs::metadata(&settings.crl).ok()?;
    if meta.len() > MAX_CRL_FILE {
        return None;
    }
    let text = std::fs::read_to_string(&settings.crl).ok()?;
    let blocks = read_pem_blocks("X509 CRL", &text).ok()?;
    check(ca_chain, blocks.first()?).ok().map(|f| f.number)
}

/// Checks `der` (see the module documentation) and writes it to `settings.crl`.
pub fn store_pushed(
    settings: &FileSettings,
    ca_chain: &[Vec<u8>],
    der: &[u8],
) -> Result<StoredCrl, CrlRefusal> {
    let facts = check(ca_chain, der).map_err(CrlRefusal::NotTheNodeCa)?;
    if let Some(held) = held(settings, ca_chain) {
        if facts.number <= held {
            return Err(CrlRefusal::NotRising {
                got: facts.number,
                held,
                path: settings.crl.display().to_string(),
            });
        }
    }
    let dir = match settings.crl.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let name = settings
        .crl
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    write_atomic_mode(
        dir,
        &name,
        pem_encode("X509 CRL", der).as_bytes(),
        settings.mode,
    )?;
    Ok(StoredCrl {
        number: facts.number,
        revoked: facts.revoked,
    })
}

/// Takes a pushed list: checks and writes it, then runs `on_renew`. Every outcome is a line for
/// `log`; nothing fails the session.
pub fn take_pushed(
    settings: &FileSettings,
    loaded: &LoadedIdentity,
    der: &[u8],
    log: &mut dyn FnMut(String),
) {
    let ca_chain = loaded.stored.chain.get(1..).unwrap_or_default();
    let stored = match store_pushed(settings, ca_chain, der) {
        Ok(stored) => stored,
        Err(e) => {
            log(e.to_string());
            return;
        }
    };
    log(format!(
        "files: wrote {} (revocation list number {}, {} revoked certificate(s))",
        settings.crl.display(),
        stored.number,
        stored.revoked
    ));
    if let Some(command) = &settings.on_renew {
        let mut env: BTreeMap<&'static str, String> = hook_env(settings, loaded);
        env.insert("BCD_CRL_FILE", settings.crl.display().to_string());
        env.insert("BCD_CRL_NUMBER", stored.number.to_string());
        match run_hook(command, &env, settings.on_renew_timeout) {
            Ok(()) => log(format!("files: on_renew {command:?} succeeded")),
            Err(e) => log(format!("files: {e}")),
        }
    }
}

#[cfg(test)]
#[path = "crl_tests.rs"]
mod tests;
