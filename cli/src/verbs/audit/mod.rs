//! `bcctl audit`: export a tenant's trail, verify it offline against a pinned key, seal
//! checkpoints on demand, and prove or check the inclusion of one event.
//!
//! Exit codes: 0 when everything holds (for `verify`: every leaf is covered by a verified
//! checkpoint signature), `EXIT_TAMPERED` (3) when the trail or proof does not verify,
//! `EXIT_USAGE` (2) for usage errors (clap's own errors use 2 as well), 1 for anything
//! operational (database unreachable, file unreadable); `verify` adds `EXIT_UNSEALED` (4, leaves
//! after the last checkpoint), `EXIT_NO_CHECKPOINT` (5) and `EXIT_TRUNCATED` (6, smaller than a
//! checkpoint or size the auditor gave).
//!
//! The export format, the proof format and every check are documented in `docs/AUDIT.md`.
//!
//! One file per job: [`args`] and [`error`] (shared by all), [`format`] (the export and proof
//! lines), [`trust`] (the key to verify with), then one per subcommand: [`export`], [`verify`]
//! (reading its leaves in [`leaves`], a checkpoint seen before in [`known`], printing in
//! [`report`]), [`seal`], [`prove`] (with `verify-proof`). This file only
//! dispatches; no file of the module uses this one.

mod args;
mod error;
mod export;
mod format;
mod known;
mod leaves;
mod prove;
mod report;
mod seal;
mod trust;
mod verify;

pub use args::AuditCommand;
pub use error::AuditCmdError;

pub async fn run(cmd: AuditCommand) -> Result<(), AuditCmdError> {
    match cmd {
        AuditCommand::Export(a) => export::export(a).await,
        AuditCommand::Verify(a) => verify::verify(a).await,
        AuditCommand::Seal(a) => seal::seal(a).await,
        AuditCommand::Prove(a) => prove::prove(a).await,
        AuditCommand::VerifyProof(a) => prove::verify_proof(a),
    }
}
