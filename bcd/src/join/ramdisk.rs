//! `bcd ramdisk` (spec 000 "Both halves in bcd", the ramdisk's half): a PXE-booted ramdisk joins
//! with what its site's boot server put on the kernel command line.
//!
//! 1. `bc.token=` and `bc.assertion=` are read from `/proc/cmdline` (`--cmdline FILE`); either
//!    missing, given twice or malformed is refused before anything is sent, and the token's text
//!    is never shown ([`parse_cmdline`]). The command line follows the kernel's rules: words
//!    separated by spaces, double quotes grouping a value with spaces (and removed);
//!    other parameters are ignored.
//! 2. A machine whose identity loads is `already joined` (nothing read further or sent).
//! 3. The join is `bcd join`'s: a fresh node key and CSR, the token sealed to the pinned
//!    JoinService encryption key bound to the CSR, attestor `discovery`, role `ramdisk`, the
//!    assertion's bytes as the attestation ([`crate::attest::discovery::DiscoveryProducer`]), the
//!    hardware claims; a deferral (pending) is waited out and retried with the same CSR; the
//!    verified answer is stored as `identity.json` and `node.key`.

use std::path::{Path, PathBuf};

use domain::attest::discovery::wire::{
    AssertionWireError, SignedDiscoveryAssertion, CMDLINE_ASSERTION, CMDLINE_TOKEN,
    DISCOVERY_ATTESTOR,
};
use domain::pki::{NodeRole, TokenSecret};
use time::Duration;

use crate::attest::discovery::DiscoveryProducer;
use crate::client::GrpcJoinTransport;
use crate::config::{Config, ConfigError};
use crate::files::identity::{load_in, LoadError};
use crate::files::DataDir;
use crate::join::exchange::{run_join, JoinEnv, JoinLoop};
use crate::join::key::join_key;
use crate::join::request::{
    load_join_encryption_key, load_join_signing_key, prepare_with_key, JoinError,
    JOIN_ENCRYPTION_JWK, JOIN_SIGNING_JWK,
};
use crate::renewal::schedule::jitter;

/// Where the kernel command line is read by default.
pub const PROC_CMDLINE: &str = "/proc/cmdline";
/// The largest command line read (the kernel's own limit is smaller).
pub const MAX_CMDLINE_LEN: u64 = 64 * 1024;

/// Why the command line gives no join.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdlineError {
    /// The file cannot be read.
    #[error("bcd ramdisk: {path}: cannot read the kernel command line: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A parameter is missing.
    #[error(
        "bcd ramdisk: the kernel command line has no {0}= (was this machine booted by a site's \
         boot server?)"
    )]
    Missing(&'static str),
    /// A parameter is given twice.
    #[error(
        "bcd ramdisk: the kernel command line has {0}= more than once; refusing to guess which \
         one the boot server meant"
    )]
    Twice(&'static str),
    /// `bc.token=` is not a token (its text is not shown).
    #[error(
        "bcd ramdisk: bc.token= on the kernel command line is not a discovery token (expected \
         bcjt_ and 43 base64url characters; the value is not shown)"
    )]
    BadToken,
    /// `bc.assertion=` does not decode.
    #[error("bcd ramdisk: bc.assertion= on the kernel command line: {0}")]
    BadAssertion(#[from] AssertionWireError),
}

/// What the boot server put on the kernel command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RamdiskCmdline {
    /// The discovery token.
    pub token: TokenSecret,
    /// The site agent's signed assertion.
    pub assertion: SignedDiscoveryAssertion,
}

/// Splits a kernel command line into its parameters, as the kernel does: spaces separate,
/// double quotes group (and are dropped).
pub fn cmdline_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// Reads `bc.token=` and `bc.assertion=` from a kernel command line.
pub fn parse_cmdline(text: &str) -> Result<RamdiskCmdline, CmdlineError> {
    let mut token = None;
    let mut assertion = None;
    for word in cmdline_words(text) {
        let Some((key, value)) = word.split_once('=') else {
            continue;
        };
        let (slot, name) = match key {
            CMDLINE_TOKEN => (&mut token, CMDLINE_TOKEN),
            CMDLINE_ASSERTION => (&mut assertion, CMDLINE_ASSERTION),
            _ => continue,
        };
        if slot.replace(value.to_owned()).is_some() {
            return Err(CmdlineError::Twice(name));
        }
    }
    let token = token
        .filter(|t| !t.is_empty())
        .ok_or(CmdlineError::Missing(CMDLINE_TOKEN))?;
    let assertion = assertion
        .filter(|a| !a.is_empty())
        .ok_or(CmdlineError::Missing(CMDLINE_ASSERTION))?;
    let token = TokenSecret::parse(&token).map_err(|_| CmdlineError::BadToken)?;
    let assertion = SignedDiscoveryAssertion::from_cmdline(&assertion)?;
    assertion.decode_assertion()?;
    Ok(RamdiskCmdline { token, assertion })
}

/// Reads and parses the command line at `path`.
pub fn read_cmdline(path: &Path) -> Result<RamdiskCmdline, CmdlineError> {
    let read_error = |reason: String| CmdlineError::Read {
        path: path.display().to_string(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| read_error(e.to_string()))?;
    if meta.len() > MAX_CMDLINE_LEN {
        return Err(read_error("larger than 64 KiB".to_owned()));
    }
    let bytes = std::fs::read(path).map_err(|e| read_error(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| read_error("not UTF-8 text".to_owned()))?;
    parse_cmdline(&text)
}

/// Why `bcd ramdisk` did not join.
#[derive(Debug, thiserror::Error)]
pub enum RamdiskError {
    /// The command line.
    #[error("{0}")]
    Cmdline(#[from] CmdlineError),
    /// The configuration (pins, server).
    #[error("bcd ramdisk: {0}")]
    Config(#[from] ConfigError),
    /// The identity on disk does not load.
    #[error("bcd ramdisk: {0}")]
    Load(#[from] LoadError),
    /// The join failed.
    #[error("{0}")]
    Join(#[from] JoinError),
    /// No async runtime.
    #[error("bcd ramdisk: cannot start an async runtime: {0}")]
    Runtime(String),
}

/// `bcd ramdisk`'s options.
#[derive(Debug, Clone)]
pub struct RamdiskArgs {
    /// `--cmdline FILE` (default [`PROC_CMDLINE`]).
    pub cmdline: PathBuf,
    /// `--approval-timeout`.
    pub approval_timeout: Duration,
}

/// Runs `bcd ramdisk`; the message printed on success.
pub fn run_ramdisk(
    config: &Config,
    dir: &DataDir,
    args: &RamdiskArgs,
) -> Result<String, RamdiskError> {
    match load_in(dir, &config.tpm_host()) {
        Ok(loaded) => return Ok(format!("already joined as {}", loaded.describe())),
        Err(LoadError::NotJoined) => {}
        Err(e) => return Err(e.into()),
    }
    let cmdline = read_cmdline(&args.cmdline)?;
    let pins = config.join_pins()?;
    let server = config.require_server()?.to_owned();
    let keys = config.keys_dir();
    let encryption_key =
        load_join_encryption_key(&keys.join(JOIN_ENCRYPTION_JWK), &pins.join_encryption)?;
    let signing_key = load_join_signing_key(&keys.join(JOIN_SIGNING_JWK), &pins.join_signing)?;
    let claims = crate::join::hardware::read_claims(&crate::join::hardware::sysfs_root());
    let mut transport =
        GrpcJoinTransport::new(&server, pins.serving_ca, signing_key.spki_der().to_vec())
            .map_err(|e| RamdiskError::Runtime(e.to_string()))?;
    let made = join_key(config, DISCOVERY_ATTESTOR).map_err(|e| JoinError::Local(e.to_string()))?;
    if let Some(warning) = &made.warning {
        eprintln!("bcd ramdisk: {warning}");
    }
    let prepared = prepare_with_key(
        made.key,
        Some((&encryption_key, &cmdline.token)),
        DISCOVERY_ATTESTOR,
        NodeRole::Ramdisk,
        claims,
    )?;
    let producer = DiscoveryProducer::new(&cmdline.assertion);
    let options = JoinLoop {
        join_signing: pins.join_signing,
        trust_domain: None,
        node_id: None,
        approval_timeout: args.approval_timeout,
    };
    let mut sleep = |d: Duration| {
        eprintln!(
            "bcd ramdisk: retrying in {:.1} s",
            d.as_seconds_f64().max(0.0)
        );
        std::thread::sleep(d.try_into().unwrap_or_default());
    };
    let mut draw = jitter;
    let mut say = |line: &str| eprintln!("{line}");
    let mut env = JoinEnv {
        sleep: &mut sleep,
        jitter: &mut draw,
        now: &crate::clock::now,
        log: &mut say,
    };
    let joined = run_join(dir, &mut transport, prepared, &producer, &options, &mut env)?;
    Ok(joined.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_the_kernels_quoting() {
        assert_eq!(
            cmdline_words("ro  console=\"ttyS0 115200\" \"a=b c\" x=\"\"\n"),
            vec!["ro", "console=ttyS0 115200", "a=b c", "x="]
        );
    }
}
