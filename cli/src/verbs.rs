//! Runs a parsed verb in this process ([`dispatch`]): every verb but the two that start
//! servers. Below the admin API server, which runs calls through it; `main` runs `up` and
//! `serve` itself.

use crate::command_line::Command;
use crate::failure::Failure;
use crate::{
    audit_cmd, batch_cmd, bundle_cmd, cloud_cmd, command_cmd, config_template_cmd, doctor_cmd,
    events_cmd, healthcheck_cmd, join_request_cmd, node_cmd, operator_cmd, pki_cmd, pool_cmd,
    rebuild_cmd, replay_cmd, site_cmd, store_cmd, tenant_cmd, token_cmd, tpm_cmd,
};

/// Runs one parsed verb other than `up` and `serve`: what `main` does for those verbs on the
/// command line, and what the admin API server does for a call (inside
/// [`crate::invocation::Invocation::scope`]). `up` and `serve` start servers (the admin API's
/// among them): `main` runs them itself, and the admin API refuses them before a call runs
/// (their role table entry is `Local`), so they never reach this.
pub(crate) async fn dispatch(command: Command) -> Result<(), Failure> {
    match command {
        Command::Up(_) | Command::Serve(_) => Err(Failure::usage(
            "up and serve start servers: they run only as bcctl's own command",
        )),
        Command::Migrate(args) => store_cmd::migrate(args).await.map_err(Failure::from),
        Command::Status(args) => store_cmd::status(args).await.map_err(Failure::from),
        Command::Pki(cmd) => pki_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Batch(cmd) => batch_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Audit(cmd) => audit_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Queue(cmd) => command_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Operator(cmd) => operator_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Token(cmd) => token_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Node(cmd) => node_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Pool(cmd) => pool_cmd::run(cmd).await.map_err(Failure::from),
        Command::JoinRequest(cmd) => join_request_cmd::run(cmd).await.map_err(Failure::from),
        Command::Tpm(cmd) => tpm_cmd::run(cmd).await.map_err(Failure::from),
        Command::Site(cmd) => site_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Cloud(cmd) => cloud_cmd::run(cmd).await.map_err(Failure::from),
        Command::Replay(args) => replay_cmd::run(args)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Bundle(cmd) => bundle_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Events(cmd) => events_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Tenant(cmd) => tenant_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Config(cmd) => {
            config_template_cmd::run(cmd);
            Ok(())
        }
        Command::Rebuild(args) => rebuild_cmd::run(args).await.map_err(|e| match e {
            rebuild_cmd::RebuildCmdError::BadBatch(_) => Failure::coded(e.to_string(), 2),
            other => Failure::from(other),
        }),
        Command::Doctor(args) => match doctor_cmd::run(args).await {
            Ok(0) => Ok(()),
            Ok(code) => Err(Failure::coded(
                format!(
                    "doctor: the worst finding is {}",
                    doctor_cmd::worst_name(code)
                ),
                code,
            )),
            Err(e) => Err(e),
        },
        Command::Healthcheck(args) => healthcheck_cmd::run(args).await,
    }
}
