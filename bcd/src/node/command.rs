//! `bcd node` and `bcd site` as commands ([`run_agent`]): the pins and the server they need,
//! the JoinService signing key trust bundles are verified under, the async runtime, and the
//! loop around [`run_node`] (or [`run_site`]) that re-joins by x509pop an identity whose
//! certificate expired ([`rejoin_if_expired`]) before giving up. Under `[helper]` `bcd node`
//! runs only as the `[helper] user` ([`check_node_user`]) and reaches its keys through
//! `bcd helper` ([`Config::key_host`]).

use crate::config::Config;
use crate::files::DataDir;
use crate::join::request::{load_join_signing_key, JOIN_SIGNING_JWK};
use crate::node::{rejoin_if_expired, run_node, NodeExit, NodeOptions, REVOKED_EXIT_MESSAGE};
use crate::site::{run_site, SiteExit, SiteOptions, STOPPED_MESSAGE};

/// Runs `bcd node`, or with `site_listen` `bcd site`, until it ends: `Ok` when a signal stopped
/// `bcd site` (exit 0), else the last line to print (exit 1).
pub fn run_agent(
    config: &Config,
    dir: &DataDir,
    site_listen: Option<String>,
) -> Result<(), String> {
    let verb = if site_listen.is_some() {
        "bcd site"
    } else {
        check_node_user(config)?;
        "bcd node"
    };
    let pin = match config.pins.serving_ca_spki_pin {
        Some(pin) => pin,
        None => {
            return Err(format!(
                "{verb}: serving_ca_spki_pin is not set in {}; copy it from `bcctl pki show`",
                config
                    .path
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "config.toml".to_owned())
            ))
        }
    };
    let server = match config.require_server() {
        Ok(server) => server.to_owned(),
        Err(e) => return Err(format!("{verb}: {e}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Err(format!("{verb}: cannot start an async runtime: {e}")),
    };
    // Welcome trust bundles are verified under the JoinService signing key before they are
    // stored: with join_signing_key_pin set, join-signing.jwk beside config.toml must match it.
    let join_signing_key = match config.pins.join_signing_key_pin {
        Some(pin) => match load_join_signing_key(&config.keys_dir().join(JOIN_SIGNING_JWK), &pin) {
            Ok(key) => Some(key),
            Err(e) => return Err(format!("{verb}: {e}")),
        },
        None => {
            eprintln!(
                "{verb}: join_signing_key_pin is not set: trust bundles from the gateway are not verified, so none is stored"
            );
            None
        }
    };
    let options = NodeOptions {
        server,
        serving_ca: pin,
        status_interval: status_interval().map_err(|e| format!("{verb}: {e}"))?,
        join_signing_key,
        tpm: config.key_host(),
        commands: config.commands.clone(),
        approver_set_pin: config.approver_set_pin,
        files: config.files.clone(),
    };
    // A certificate that expired while the machine was off (or before a renewal succeeded)
    // re-joins by x509pop from the identity on disk, logged, before bcd gives up.
    let mut expired_again = false;
    loop {
        match rejoin_if_expired(
            dir,
            &options,
            crate::join::hardware::read_claims(&crate::join::hardware::sysfs_root()),
        ) {
            Ok(Some(_)) => expired_again = false,
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        let exit = match &site_listen {
            None => runtime.block_on(run_node(dir, &options)),
            Some(listen) => {
                let site = SiteOptions {
                    node: options.clone(),
                    listen: listen.clone(),
                };
                match runtime.block_on(run_site(dir, &site)) {
                    SiteExit::Node(exit) => exit,
                    SiteExit::Stopped => {
                        eprintln!("{STOPPED_MESSAGE}");
                        return Ok(());
                    }
                    other => return Err(other.to_string()),
                }
            }
        };
        match exit {
            // run_node logged `certificate revoked: <reason> (serial ...)`.
            NodeExit::Revoked { .. } => return Err(REVOKED_EXIT_MESSAGE.to_owned()),
            // Twice without a re-join in between: the clock says expired but the re-join
            // thinks not; stop rather than spin.
            NodeExit::Expired(at) if expired_again => return Err(NodeExit::Expired(at).to_string()),
            NodeExit::Expired(_) => expired_again = true,
            other => return Err(other.to_string()),
        }
    }
}

/// Under `[helper]`: this process must run as the `[helper] user` (the only user the helper
/// serves; bcd.service starts it so). Without `[helper]` anyone may run `bcd node`.
pub fn check_node_user(config: &Config) -> Result<(), String> {
    let Some(helper) = &config.helper else {
        return Ok(());
    };
    let uid = crate::helper::privilege::euid();
    let expected = crate::helper::privilege::SystemUser::by_name(&helper.user)
        .map_err(|e| format!("bcd node: [helper] user: {e}"))?;
    if uid == expected.uid {
        return Ok(());
    }
    Err(format!(
        "bcd node: [helper] user is {user}; this process runs as {name} (uid {uid}): run it as \
         {user} (bcd.service does)",
        user = helper.user,
        name = crate::helper::privilege::user_name(uid),
    ))
}

/// The environment variable that sets how often `bcd node` sends a StatusReport (whole seconds
/// from 1 to 3600; default 30). A newer trust bundle reaches a connected node at its next
/// report.
pub const STATUS_INTERVAL_ENV: &str = "BCD_STATUS_INTERVAL_SECONDS";

fn status_interval() -> Result<std::time::Duration, String> {
    parse_status_interval(std::env::var(STATUS_INTERVAL_ENV).ok().as_deref())
}

/// [`STATUS_INTERVAL_ENV`]'s value (`None`: unset) as the interval.
fn parse_status_interval(value: Option<&str>) -> Result<std::time::Duration, String> {
    let Some(text) = value else {
        return Ok(std::time::Duration::from_secs(30));
    };
    match text.trim().parse::<u64>() {
        Ok(s) if (1..=3600).contains(&s) => Ok(std::time::Duration::from_secs(s)),
        _ => Err(format!(
            "{STATUS_INTERVAL_ENV}: must be whole seconds from 1 to 3600, got {text:?}; unset it for the default of 30 s"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_status_interval_is_whole_seconds_from_1_to_3600_or_30_by_default() {
        assert_eq!(parse_status_interval(None), Ok(Duration::from_secs(30)));
        assert_eq!(parse_status_interval(Some("1")), Ok(Duration::from_secs(1)));
        assert_eq!(
            parse_status_interval(Some("3600")),
            Ok(Duration::from_secs(3600))
        );
        for bad in ["0", "3601", "1.5", "-1", "", "30s"] {
            assert_eq!(
                parse_status_interval(Some(bad)),
                Err(format!(
                    "BCD_STATUS_INTERVAL_SECONDS: must be whole seconds from 1 to 3600, got {bad:?}; unset it for the default of 30 s"
                )),
                "{bad:?}"
            );
        }
    }
}
