//! The role table against the command tree and against docs/ADMIN-API.md.

use super::*;
use clap::CommandFactory;

/// Every leaf verb of `bcctl`'s grammar with the ids of its arguments that read the environment.
fn leaves() -> Vec<(String, Vec<String>)> {
    fn walk(c: &clap::Command, path: Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
        let subs: Vec<_> = c
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .collect();
        if subs.is_empty() {
            let envs = c
                .get_arguments()
                .filter(|a| a.get_env().is_some())
                .map(|a| a.get_id().to_string())
                .collect();
            out.push((path.join(" "), envs));
        }
        for s in subs {
            let mut p = path.clone();
            p.push(s.get_name().to_string());
            walk(s, p, out);
        }
    }
    let mut out = Vec::new();
    walk(&crate::Cli::command(), Vec::new(), &mut out);
    out
}

#[test]
fn every_verb_of_the_command_tree_is_decided() {
    let undecided: Vec<String> = leaves()
        .into_iter()
        .map(|(v, _)| v)
        .filter(|v| !TABLE.iter().any(|(t, _)| t == v))
        .collect();
    assert!(
        undecided.is_empty(),
        "verbs the role table (cli/src/admin/roles.rs and docs/ADMIN-API.md) does not decide: {undecided:?}"
    );
}

/// Arguments with `env = …` on remotable verbs that their owners are taking out (the `--actor`
/// flags become the authenticated actor). The server strips every `env` before it parses a
/// call, so none of them reads the server's environment meanwhile.
const PENDING_ENV: &[(&str, &str)] = &[
    ("join-request approve", "actor"),
    ("join-request reject", "actor"),
    ("tpm allow", "actor"),
    ("tpm revoke", "actor"),
    ("site create", "actor"),
    ("site boot add", "actor"),
    ("site boot remove", "actor"),
    ("site lease fence", "actor"),
    ("cloud account add", "actor"),
    ("cloud account remove", "actor"),
];

#[test]
fn no_remotable_verb_reads_the_environment() {
    let mut reading = Vec::new();
    for (verb, envs) in leaves() {
        if access(&verb) == Access::Local {
            continue;
        }
        for id in envs {
            if !PENDING_ENV.contains(&(verb.as_str(), id.as_str())) {
                reading.push(format!("{verb} --{id}"));
            }
        }
    }
    assert!(
        reading.is_empty(),
        "remotable verbs with an `env = …` argument (clap would read the SERVER's environment): {reading:?}"
    );
}

#[test]
fn the_server_parser_reads_no_environment() {
    fn has_env(c: &clap::Command) -> bool {
        c.get_arguments().any(|a| a.get_env().is_some()) || c.get_subcommands().any(has_env)
    }
    assert!(has_env(&crate::Cli::command()));
    assert!(!has_env(&crate::admin::run::server_command()));
}

/// The table in docs/ADMIN-API.md between its markers: `| verb | roles |` rows, roles either
/// "not remotable" or a comma-separated list.
fn doc_table() -> Vec<(String, Access)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ADMIN-API.md");
    let text = std::fs::read_to_string(path).expect("docs/ADMIN-API.md");
    let start = text
        .find("<!-- roles:begin -->")
        .expect("roles:begin marker");
    let end = text.find("<!-- roles:end -->").expect("roles:end marker");
    let mut rows = Vec::new();
    for line in text[start..end].lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.len() != 2 || cells[0] == "verb" || cells[0].starts_with("---") {
            continue;
        }
        let verb = cells[0].trim_matches('`').to_string();
        let access = if cells[1] == "not remotable" {
            Access::Local
        } else {
            let mut roles: Vec<OperatorRole> = cells[1]
                .split(',')
                .map(|r| OperatorRole::parse(r.trim()).expect("a role name"))
                .collect();
            roles.sort();
            Access::Roles(Box::leak(roles.into_boxed_slice()))
        };
        rows.push((verb, access));
    }
    rows
}

#[test]
fn the_documented_table_is_the_code_table() {
    let doc = doc_table();
    let code: Vec<(String, Access)> = TABLE
        .iter()
        .map(|(v, a)| {
            let a = match a {
                Access::Local => Access::Local,
                Access::Roles(r) => {
                    let mut r = r.to_vec();
                    r.sort();
                    Access::Roles(Box::leak(r.into_boxed_slice()))
                }
            };
            (v.to_string(), a)
        })
        .collect();
    assert_eq!(
        doc, code,
        "docs/ADMIN-API.md's table differs from cli/src/admin/roles.rs"
    );
}

#[test]
fn the_hierarchy_holds() {
    for (verb, a) in TABLE {
        if let Access::Roles(_) = a {
            assert!(allows(OperatorRole::Admin, verb), "admin may run {verb}");
        }
        if allows(OperatorRole::Auditor, verb) && *verb != "bundle show" {
            assert!(
                allows(OperatorRole::Operator, verb),
                "operator reads {verb}"
            );
        }
    }
    assert!(allows(OperatorRole::Approver, "batch submit-approval"));
    assert!(!allows(OperatorRole::Operator, "batch submit-approval"));
    assert!(!allows(OperatorRole::Auditor, "token create"));
    assert!(!allows(OperatorRole::Admin, "serve"));
    assert!(!allows(OperatorRole::Admin, "no such verb"));
    assert_eq!(required_role("token create"), Some(OperatorRole::Operator));
    assert_eq!(required_role("audit seal"), Some(OperatorRole::Admin));
    assert_eq!(required_role("events list"), Some(OperatorRole::Auditor));
    assert_eq!(required_role("batch approve"), None);
    assert_eq!(
        verbs_for(OperatorRole::Approver),
        [
            "batch show",
            "batch scope",
            "batch list",
            "batch submit-approval",
            "bundle show",
            "oidc discovery"
        ]
    );
}
