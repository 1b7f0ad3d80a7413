//! `bcd join` as a command ([`join`]): the attestor and its credential, `--reset`, the
//! configuration checks before a token is read, the exchange, and after the identity is stored the
//! PEM files (`[files]`, [`crate::files::pem_files`]) and `on_renew`. `main.rs` parses the command
//! line and calls it.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use domain::attest::tpm::TPM_ATTESTOR;
use domain::pki::NodeRole;
use time::OffsetDateTime;

use crate::attest::cloud_iid::{cloud_producer, CLOUD_IID};
use crate::attest::command::CommandProducer;
use crate::attest::{EvidenceProducer, NoEvidence, JOIN_TOKEN, PROVISIONED, X509POP};
use crate::client::GrpcJoinTransport;
use crate::config::Config;
use crate::files::identity::{load_in, LoadError};
use crate::files::DataDir;
use crate::helper::privilege::{is_root, SystemUser};
use crate::join::exchange::{parse_duration, run_join, JoinEnv, JoinLoop};
use crate::join::handover::{hand_over, join_hand_over_to};
use crate::join::hardware::uuid_warning;
use crate::join::key::{join_key, JoinKey};
use crate::join::pending::{
    discard as discard_pending, keeps, load as pending_join, save as save_pending,
    JOIN_PENDING_FILE,
};
use crate::join::request::{
    load_join_encryption_key, load_join_signing_key, prepare_with_csr, prepare_with_key, JoinError,
    PreparedJoin, JOIN_ENCRYPTION_JWK, JOIN_SIGNING_JWK,
};
use crate::join::reset::{plan, DRY_RUN_EXIT, RESET_NOT_ROOT};
use crate::join::token_input::{discard_token_file, read_token, Consumed, ProcessEnv};
use crate::node::rejoin_x509pop;
use crate::renewal::schedule::jitter;

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(1)
}

/// After a join committed identity.json: the PEM files (`[files]`), then `on_renew`. Never
/// fails the join; `bcd node` repairs the files at its start.
pub fn publish_files(config: &Config, dir: &DataDir, verb: &str) {
    match load_in(dir, &config.tpm_host()) {
        Ok(loaded) => {
            crate::files::pem_files::refresh(&config.files, &loaded, &mut |line| {
                eprintln!("{verb}: {line}")
            });
        }
        Err(e) => eprintln!("{verb}: files: the PEM files were not written: {e}"),
    }
}

/// The join's key: that of a request an earlier join sent and got no answer to, sent again key
/// and CSR byte for byte (`join.pending`: the control plane answers it with the identity it
/// issued, if it did), else a new one ([`join_key`]). The CSR is `Some` for a kept request.
fn key_for_join(
    config: &Config,
    dir: &DataDir,
    attestor: &str,
) -> Result<(JoinKey, Option<Vec<u8>>), ExitCode> {
    let kept = keeps(attestor)
        .then(|| pending_join(dir, attestor, &config.tpm_host(), &mut |l| eprintln!("{l}")))
        .flatten();
    if let Some(kept) = kept {
        eprintln!(
            "bcd join: sending again the request of an earlier join that got no answer ({})",
            dir.file(JOIN_PENDING_FILE).display()
        );
        let key = JoinKey {
            key: kept.key,
            producer: None,
            warning: None,
        };
        return Ok((key, Some(kept.csr_der)));
    }
    join_key(config, attestor)
        .map(|made| (made, None))
        .map_err(fail)
}

/// Keeps the request in `join.pending` before it is sent, for the attestors whose same request
/// is answered again ([`crate::join::pending`]); nothing is sent when it cannot be kept.
fn keep_request(dir: &DataDir, attestor: &str, prepared: &PreparedJoin) -> Result<(), ExitCode> {
    if !keeps(attestor) {
        return Ok(());
    }
    save_pending(dir, attestor, &prepared.key, &prepared.request.csr_der).map_err(|e| {
        fail(format_args!(
            "bcd join: keeping the request before it is sent: {e}; nothing was sent"
        ))
    })
}

/// The hand-over under `[helper]` (see [`crate::join::handover`]); nothing without it. A failure is
/// exit 1: the identity is stored, but the unprivileged `bcd node` could not use it.
fn give_to(config: &Config, dir: &DataDir, user: Option<&SystemUser>) -> Result<(), ExitCode> {
    let Some(user) = user else {
        return Ok(());
    };
    match hand_over(dir, &config.files, user) {
        Ok(_) => {
            println!(
                "handed {} over to {} (uid {}) for bcd node",
                dir.root().display(),
                user.name,
                user.uid
            );
            Ok(())
        }
        Err(e) => Err(fail(format_args!(
            "bcd join: the identity is stored, but not handed over: {e}; fix it and run bcd join \
             again as root (it hands over an identity already there)"
        ))),
    }
}

/// `bcd join`'s options.
pub struct JoinArgs {
    /// `--token-file`.
    pub token_file: Option<PathBuf>,
    /// `--reset`.
    pub reset: bool,
    /// `--yes`.
    pub yes: bool,
    /// `--role`.
    pub role: NodeRole,
    /// `--attestor` (default join-token, or provisioned with `--node-id`).
    pub attestor: Option<String>,
    /// `--evidence-command`.
    pub evidence_command: Option<String>,
    /// `--provider` (cloud-iid).
    pub provider: Option<String>,
    /// `--node-id`.
    pub node_id: Option<String>,
    /// `--approval-timeout`, as given.
    pub approval_timeout: String,
}

fn usage(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("bcd join: {message}");
    ExitCode::from(2)
}

/// Whether `attestor` takes a token (sealed into the request) as its credential.
fn takes_token(attestor: &str) -> bool {
    attestor == JOIN_TOKEN || attestor == PROVISIONED
}

/// Runs `bcd join`; its exit code (0 joined or already joined, 1 failed, 2 usage or the dry
/// run of `--reset`).
pub fn join(config: &Config, dir: &DataDir, args: JoinArgs, now: OffsetDateTime) -> ExitCode {
    let JoinArgs {
        token_file,
        reset,
        yes,
        role,
        attestor,
        evidence_command,
        provider,
        node_id,
        approval_timeout,
    } = args;
    // Before anything is read or moved, the dry run too: a reset moves root's files.
    if reset && !is_root() {
        return fail(RESET_NOT_ROOT);
    }
    let attestor = attestor.unwrap_or_else(|| {
        if node_id.is_some() {
            PROVISIONED.to_owned()
        } else {
            JOIN_TOKEN.to_owned()
        }
    });
    let approval_timeout = match parse_duration(&approval_timeout) {
        Ok(d) if d.is_positive() => d,
        Ok(_) => return usage("--approval-timeout must be more than 0s"),
        Err(e) => return usage(format_args!("--approval-timeout: {e}")),
    };
    let builtin =
        takes_token(&attestor) || [X509POP, TPM_ATTESTOR, CLOUD_IID].contains(&&*attestor);
    let cloud = match cloud_producer(&attestor, provider.as_deref(), &config.cloud) {
        Ok(cloud) => cloud,
        Err(e) => return usage(e),
    };
    match (&evidence_command, builtin) {
        (Some(_), true) => {
            return usage(format_args!(
                "--evidence-command is for another attestor; {attestor} evidence is bcd's own"
            ))
        }
        (None, false) => {
            return usage(format_args!(
            "bcd has no producer of its own for attestor {attestor:?}: give --evidence-command CMD"
        ))
        }
        _ => {}
    }
    if !takes_token(&attestor) {
        if token_file.is_some() && attestor == TPM_ATTESTOR {
            return usage(
                "--token-file with --attestor tpm: the TPM is the credential of a tpm join; no \
                 token is read or sent (drop --token-file)",
            );
        }
        if token_file.is_some() {
            return usage(format_args!(
                "--token-file: the {attestor} attestor takes no token"
            ));
        }
        // No token is read or sent: drop one from the environment so no child inherits it.
        std::env::remove_var(crate::join::token_input::TOKEN_ENV);
    }
    if attestor == X509POP && reset {
        return usage("--reset moves the identity aside, and x509pop re-joins from it: not both");
    }

    // Under [helper] the identity goes to the helper's user: only root can give it.
    let hand_to = match join_hand_over_to(config.helper.as_ref(), is_root()) {
        Ok(user) => user,
        Err(message) => return fail(message),
    };

    if reset {
        let plan = plan(dir, now);
        if !yes {
            print!("{}", plan.describe_dry_run());
            return ExitCode::from(DRY_RUN_EXIT as u8);
        }
        match plan.execute() {
            Ok(moved) if moved.is_empty() => {
                println!(
                    "bcd join --reset: no identity in {}; nothing moved",
                    dir.root().display()
                )
            }
            Ok(moved) => {
                for m in moved {
                    println!(
                        "moved {} -> {}",
                        dir.file(&m.from).display(),
                        dir.file(&m.to).display()
                    );
                }
            }
            Err(e) => return fail(format_args!("bcd join --reset: {e}")),
        }
        let _ = std::io::stdout().flush();
    }

    let mut current = None;
    match load_in(dir, &config.tpm_host()) {
        Ok(loaded) if attestor == X509POP => current = Some(loaded),
        Ok(loaded) => {
            if let Some(wanted) = node_id.as_deref() {
                if loaded.leaf.spiffe_id.node.as_str() != wanted {
                    return fail(format_args!(
                        "bcd join: already joined as {}, not as {wanted} (--node-id); nothing \
                         was read or sent",
                        loaded.describe()
                    ));
                }
            }
            // No credential is read on a machine whose identity loads. A join killed between
            // identity.json and its PEM copies left them stale: they are repaired here too.
            crate::files::pem_files::refresh(&config.files, &loaded, &mut |line| {
                eprintln!("bcd join: {line}")
            });
            println!("already joined as {}", loaded.describe());
            // Stored, then killed before `join.pending` was removed.
            discard_pending(dir);
            // A join killed before its hand-over is repaired by running it again.
            if let Err(code) = give_to(config, dir, hand_to.as_ref()) {
                return code;
            }
            if let Some(record) = crate::files::revoked::revoked(dir, &loaded.leaf.serial.to_hex())
            {
                eprintln!(
                    "bcd join: {}; {}",
                    record.describe(),
                    crate::files::revoked::REVOKED_WAY_BACK
                );
            }
            if let Some(path) = token_file {
                if let Consumed::Kept { warning, .. } = discard_token_file(&path) {
                    eprintln!("{warning}");
                }
            }
            return ExitCode::SUCCESS;
        }
        Err(LoadError::NotJoined) if attestor == X509POP => {
            return fail(format_args!(
                "bcd join --attestor x509pop: this node has not joined: x509pop re-joins from the \
                 identity on disk (in {}); join with a token first",
                dir.root().display()
            ))
        }
        Err(LoadError::NotJoined) => {}
        Err(e) => return fail(format_args!("bcd join: {e}")),
    }

    // Configuration problems first, so a token is not read for a join that cannot start.
    if let Err(e) = config.join_pins() {
        return fail(format_args!("bcd join: {e}"));
    }
    if let Err(e) = config.require_server() {
        return fail(format_args!("bcd join: {e}"));
    }
    let stdin = std::io::stdin();
    let mut stdin = stdin.lock();
    let pins = match config.join_pins() {
        Ok(pins) => pins,
        Err(e) => return fail(format_args!("bcd join: {e}")),
    };
    let server = match config.require_server() {
        Ok(server) => server.to_owned(),
        Err(e) => return fail(format_args!("bcd join: {e}")),
    };
    let token = if takes_token(&attestor) {
        match read_token(token_file.as_deref(), &mut ProcessEnv, &mut stdin) {
            Ok(token) => Some(token),
            Err(e) => return fail(format_args!("bcd join: {e}")),
        }
    } else {
        None
    };
    // The JoinService's public keys live beside config.toml, each checked against its pin.
    // (Read after the token: a missing file is a setup problem, and the token is not lost.)
    let beside = config.keys_dir();
    let encryption_key = match &token {
        Some(_) => {
            match load_join_encryption_key(&beside.join(JOIN_ENCRYPTION_JWK), &pins.join_encryption)
            {
                Ok(key) => Some(key),
                Err(e) => return fail(e),
            }
        }
        None => None,
    };
    let signing_key =
        match load_join_signing_key(&beside.join(JOIN_SIGNING_JWK), &pins.join_signing) {
            Ok(key) => key,
            Err(e) => return fail(e),
        };
    let sys = crate::join::hardware::sysfs_root();
    let read = crate::join::hardware::read_claims_explained(&sys);
    if let Some(warning) = uuid_warning(&sys, read.uuid_missing.as_ref()) {
        eprintln!("{warning}");
    }
    let claims = read.claims;
    let mut transport =
        match GrpcJoinTransport::new(&server, pins.serving_ca, signing_key.spki_der().to_vec()) {
            Ok(transport) => transport,
            Err(e) => return fail(format_args!("bcd join: cannot start an async runtime: {e}")),
        };
    let mut sleep = |d: time::Duration| {
        eprintln!("bcd join: retrying in {:.1} s", d.as_seconds_f64().max(0.0));
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

    if let Some(current) = current {
        // x509pop: the identity on disk proves itself; the issued identity must be this node.
        if let Some(wanted) = node_id.as_deref() {
            if current.leaf.spiffe_id.node.as_str() != wanted {
                return fail(format_args!(
                    "bcd join --attestor x509pop: the identity on disk is {}, not {wanted} \
                     (--node-id); nothing was sent",
                    current.describe()
                ));
            }
        }
        return match rejoin_x509pop(
            dir,
            &mut transport,
            &current,
            &signing_key,
            claims,
            approval_timeout,
            &mut env,
        ) {
            Ok(rejoined) => {
                crate::fault::point("join:stored");
                println!("{}", rejoined.message());
                println!(
                    "the previous certificate (serial {}) is revoked",
                    rejoined.replaced_serial
                );
                publish_files(config, dir, "bcd join");
                match give_to(config, dir, hand_to.as_ref()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(code) => code,
                }
            }
            Err(e) => fail(e),
        };
    }

    let (made, kept_csr) = match key_for_join(config, dir, &attestor) {
        Ok(chosen) => chosen,
        Err(code) => return code,
    };
    if let Some(warning) = &made.warning {
        eprintln!("bcd join: {warning}");
    }
    let producer: Box<dyn EvidenceProducer> = match (made.producer, &evidence_command, cloud) {
        (Some(tpm), _, _) => tpm,
        (None, _, Some(cloud)) => Box::new(cloud),
        (None, Some(command), None) => Box::new(CommandProducer::new(&attestor, command)),
        (None, None, None) => Box::new(NoEvidence::new(&attestor)),
    };
    let sealed = match (&encryption_key, &token) {
        (Some(key), Some(token)) => Some((key, &token.secret)),
        _ => None,
    };
    let prepared = match kept_csr {
        Some(csr) => prepare_with_csr(made.key, csr, sealed, &attestor, role, claims),
        None => prepare_with_key(made.key, sealed, &attestor, role, claims),
    };
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(e) => return fail(e),
    };
    if let Err(code) = keep_request(dir, &attestor, &prepared) {
        return code;
    }
    let options = JoinLoop {
        join_signing: pins.join_signing,
        trust_domain: None,
        node_id: node_id.as_deref(),
        approval_timeout,
    };
    let result = run_join(
        dir,
        &mut transport,
        prepared,
        producer.as_ref(),
        &options,
        &mut env,
    );
    match result {
        Ok(joined) => {
            crate::fault::point("join:stored");
            println!("{}", joined.message());
            if let Some(moved) = &joined.stored.journal_moved_to {
                println!("another node's journal.db moved to {moved}");
            }
            // The join's trust bundle offers an approver set: take it under the one epoch rule
            // (and the first-set pin) now; every session start settles it again.
            crate::node::settle_stored_set(dir, config.approver_set_pin.as_ref());
            publish_files(config, dir, "bcd join");
            if let Some(token) = token {
                if let Consumed::Kept { warning, .. } = token.consume() {
                    eprintln!("{warning}");
                }
            }
            match give_to(config, dir, hand_to.as_ref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(code) => code,
            }
        }
        Err(e) => {
            if matches!(e, JoinError::Refused { .. }) {
                // A refused request admits nothing if sent again.
                discard_pending(dir);
            }
            fail(e)
        }
    }
}
