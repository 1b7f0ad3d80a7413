//! The systemd units the install script writes under `[helper]`, made from `deploy/systemd`'s
//! for this node: the units there name `/usr/local/bin/bcd`, `/etc/bcd` and `/var/lib/bcd`; the
//! script's units name the binary, configuration directory and data directory the script itself
//! uses (`--bcd`, `$BCD_ETC`, `--data-dir`), and the `[helper] user`, so an install with other
//! paths gets units that run what it installed.

/// The unit of `bcd node` under the privilege split (`deploy/systemd/bcd.service`).
pub const NODE_UNIT: &str = include_str!("../../../deploy/systemd/bcd.service");
/// The unit of `bcd helper` (`deploy/systemd/bcd-helper.service`).
pub const HELPER_UNIT: &str = include_str!("../../../deploy/systemd/bcd-helper.service");

/// Where `$BCD_ETC` goes in a unit the script writes: the script puts its own value there
/// when it runs (an operator may set `BCD_ETC`).
pub const ETC_PLACEHOLDER: &str = "@BCD_ETC@";

/// `unit` with the binary `bcd`, the configuration directory [`ETC_PLACEHOLDER`], the data
/// directory `data` and the user `user` in place of deploy/systemd's.
pub fn unit_for(unit: &str, bcd: &str, data: &str, user: &str) -> String {
    unit.replace("/usr/local/bin/bcd", bcd)
        .replace("/etc/bcd", ETC_PLACEHOLDER)
        .replace("/var/lib/bcd", data)
        .replace(
            "\nUser=bcd\nGroup=bcd\n",
            &format!("\nUser={user}\nGroup={user}\n"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_units_name_this_installs_paths_and_user() {
        let node = unit_for(NODE_UNIT, "/opt/bc/bin/bcd", "/srv/bcd", "agent");
        for line in [
            "ExecStart=/opt/bc/bin/bcd node --config @BCD_ETC@/config.toml",
            "Environment=BCD_DATA_DIR=/srv/bcd",
            "ConditionPathExists=/srv/bcd/identity.json",
            "ReadWritePaths=/srv/bcd",
            "User=agent",
            "Group=agent",
        ] {
            assert!(node.lines().any(|l| l == line), "{line} not in:\n{node}");
        }
        let helper = unit_for(HELPER_UNIT, "/opt/bc/bin/bcd", "/srv/bcd", "agent");
        for line in [
            "ExecStart=/opt/bc/bin/bcd --config @BCD_ETC@/config.toml helper",
            "ConditionPathExists=@BCD_ETC@/config.toml",
        ] {
            assert!(
                helper.lines().any(|l| l == line),
                "{line} not in:\n{helper}"
            );
        }
        for unit in [&node, &helper] {
            assert!(
                !unit.contains("/usr/local/bin")
                    && !unit.contains("/var/lib/bcd")
                    && !unit.contains("/etc/bcd"),
                "{unit}"
            );
        }
    }
}
