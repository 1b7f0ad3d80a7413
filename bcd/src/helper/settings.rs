//! `[helper]` in `config.toml`: the privilege split is on when `user` is set (spec 002 "Through
//! bcd helper"). `bcd node` then runs as that user and reaches its TPM-held keys only through
//! `bcd helper`'s socket, which only that user may use.

use std::path::PathBuf;

use serde::Deserialize;

/// Where `bcd helper` listens when `[helper] socket` names no other path (systemd's
/// `RuntimeDirectory=bcd-helper` makes the directory).
pub const DEFAULT_HELPER_SOCKET: &str = "/run/bcd-helper/helper.sock";

/// `[helper]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHelper {
    pub(crate) user: Option<String>,
    pub(crate) socket: Option<PathBuf>,
}

/// `[helper]`, when configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperSettings {
    /// `[helper] user`: the user `bcd node` runs as and the only one the helper serves.
    pub user: String,
    /// `[helper] socket`: the helper's Unix socket.
    pub socket: PathBuf,
}

impl RawHelper {
    /// The settings, `None` without a `user`; a `socket` without a `user` is an error (the
    /// split is half configured).
    pub(crate) fn settings(self) -> Result<Option<HelperSettings>, String> {
        let user = self.user.map(|u| u.trim().to_owned());
        match (user, self.socket) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(
                "socket is set but user is not: name the user bcd node runs as (user = \"bcd\"), \
                 or remove the [helper] section"
                    .into(),
            ),
            (Some(user), _) if user.is_empty() || user == "root" => Err(format!(
                "user {user:?}: the helper serves an unprivileged bcd node; name its user \
                 (user = \"bcd\"), not root"
            )),
            (Some(user), socket) => {
                let socket = socket.unwrap_or_else(|| PathBuf::from(DEFAULT_HELPER_SOCKET));
                if !socket.is_absolute() {
                    return Err(format!(
                        "socket {}: must be an absolute path",
                        socket.display()
                    ));
                }
                Ok(Some(HelperSettings { user, socket }))
            }
        }
    }
}
