//! Runs a parsed verb in this process ([`dispatch`]): every verb but the two that start
//! servers. Below the admin API server, which runs calls through it; `main` runs `up` and
//! `serve` itself.

use crate::command_line::failure::Failure;
use crate::command_line::Command;
use crate::verbs::{
    attestor, audit, batch, bundle, cloud, command, config_template, doctor, events, healthcheck,
    join_request, node, oidc, operator, pki, pool, rebuild, replay, site, ssh, store, tenant,
    token, tpm,
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
        Command::Migrate(args) => store::migrate(args).await.map_err(Failure::from),
        Command::Status(args) => store::status(args).await.map_err(Failure::from),
        Command::Pki(cmd) => pki::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Batch(cmd) => batch::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Audit(cmd) => audit::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Queue(cmd) => command::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Operator(cmd) => operator::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Ssh(cmd) => ssh::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Token(cmd) => token::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Node(cmd) => node::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Pool(cmd) => pool::run(cmd).await.map_err(Failure::from),
        Command::JoinRequest(cmd) => join_request::run(cmd).await.map_err(Failure::from),
        Command::Attestor(cmd) => attestor::run(cmd).await.map_err(Failure::from),
        Command::Tpm(cmd) => tpm::run(cmd).await.map_err(Failure::from),
        Command::Site(cmd) => site::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Cloud(cmd) => cloud::run(cmd).await.map_err(Failure::from),
        Command::Replay(args) => replay::run(args)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Bundle(cmd) => bundle::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Events(cmd) => events::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Tenant(cmd) => tenant::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Oidc(cmd) => oidc::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Config(cmd) => {
            config_template::run(cmd);
            Ok(())
        }
        Command::Rebuild(args) => rebuild::run(args).await.map_err(|e| match e {
            rebuild::RebuildCmdError::BadBatch(_) => Failure::coded(e.to_string(), 2),
            other => Failure::from(other),
        }),
        Command::Doctor(args) => match doctor::run(args).await {
            Ok(0) => Ok(()),
            Ok(code) => Err(Failure::coded(
                format!("doctor: the worst finding is {}", doctor::worst_name(code)),
                code,
            )),
            Err(e) => Err(e),
        },
        Command::Healthcheck(args) => healthcheck::run(args).await,
    }
}
