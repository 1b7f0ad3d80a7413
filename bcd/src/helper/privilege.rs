//! Who this process is, and who the `[helper] user` is (spec 002 "Joining", "Through bcd
//! helper"): `bcd join` and `bcd helper` run as root, an unprivileged `bcd node` as the helper's
//! user. Every check of "am I root" and every lookup of a user by name is here, read from the
//! system's user database through `nix`'s safe wrappers.

use nix::unistd::{Gid, Group, Uid, User};

/// This process's effective uid.
pub fn euid() -> u32 {
    Uid::effective().as_raw()
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    Uid::effective().is_root()
}

/// Why a user could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserError {
    /// No such user in the user database.
    #[error("there is no user {0:?} on this machine (create it: useradd --system --user-group --no-create-home --shell /usr/sbin/nologin {0})")]
    NoSuchUser(String),
    /// The lookup itself failed.
    #[error("looking up user {name:?}: {reason}")]
    Lookup {
        /// The name.
        name: String,
        /// The system's answer.
        reason: String,
    },
}

/// A user of this machine: its name, uid, primary gid and every group it is a member of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemUser {
    /// The login name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Every group it belongs to (primary and supplementary), by gid.
    pub groups: Vec<u32>,
}

impl SystemUser {
    /// Looks `name` up in the user database, with its group list.
    pub fn by_name(name: &str) -> Result<SystemUser, UserError> {
        let lookup = |reason: String| UserError::Lookup {
            name: name.to_owned(),
            reason,
        };
        let user = User::from_name(name)
            .map_err(|e| lookup(e.to_string()))?
            .ok_or_else(|| UserError::NoSuchUser(name.to_owned()))?;
        let c_name = std::ffi::CString::new(name).map_err(|e| lookup(e.to_string()))?;
        let groups = nix::unistd::getgrouplist(&c_name, user.gid)
            .map_err(|e| lookup(format!("its groups: {e}")))?
            .into_iter()
            .map(Gid::as_raw)
            .collect();
        Ok(SystemUser {
            name: user.name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            groups,
        })
    }

    /// Whether it is a member of the group named `group` (false when no such group exists).
    pub fn in_group(&self, group: &str) -> bool {
        match Group::from_name(group) {
            Ok(Some(g)) => self.groups.contains(&g.gid.as_raw()),
            _ => false,
        }
    }
}

/// The name of the user with `uid`, or the uid itself when it has none.
pub fn user_name(uid: u32) -> String {
    match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => format!("uid {uid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_found_with_its_group() {
        let root = SystemUser::by_name("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.in_group("root"));
        assert!(!root.in_group("no-such-group-here"));
        assert_eq!(user_name(0), "root");
    }

    #[test]
    fn an_unknown_user_says_how_to_make_it() {
        assert_eq!(
            SystemUser::by_name("no-such-user-bcd")
                .unwrap_err()
                .to_string(),
            "there is no user \"no-such-user-bcd\" on this machine (create it: useradd --system \
             --user-group --no-create-home --shell /usr/sbin/nologin no-such-user-bcd)"
        );
    }
}
