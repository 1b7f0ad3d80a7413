//! Which verbs run through the admin API, and which of their flags name files on the CALLER's
//! machine: the inputs the client reads and sends with the call, and the outputs the server
//! returns in the reply for the client to write. Both sides use this one table: the client
//! (`--server`) to ship and write files, the server (`admin/run.rs`) to accept only the inputs
//! a verb's entry names. A verb absent from [`REMOTE_VERBS`] is direct-store only
//! ([`DIRECT_ONLY`]): bootstrap and offline work, refused with `--server` (exit 2).
//!
//! Flags are named by their clap id (the field name: `payload_file` for `--payload-file`).
//! A path of `-` is standard input/output and is never a file. A test walks the whole verb
//! tree: every leaf verb is in one list or the other, and every path-valued argument of a
//! remotable verb is in its inputs or outputs (or [`NOT_FILES`]), so a new file flag cannot
//! silently read or write the server's disk.

// Parts of this API serve the admin server (files) and `batch approve --server` (client).
#![allow(dead_code)]

use std::path::PathBuf;

/// One remotable verb: its path ("token create"), the flags naming files it reads on the
/// caller's machine, and those naming files it writes there.
#[derive(Clone, Copy, Debug)]
pub struct VerbFiles {
    pub verb: &'static str,
    pub inputs: &'static [&'static str],
    pub outputs: &'static [&'static str],
    /// The outputs must not exist yet (the verb never overwrites them in direct mode): the
    /// client checks before the call and creates them new.
    pub fresh: bool,
}

const fn reads(verb: &'static str, inputs: &'static [&'static str]) -> VerbFiles {
    VerbFiles {
        verb,
        inputs,
        outputs: &[],
        fresh: false,
    }
}

const fn writes(verb: &'static str, outputs: &'static [&'static str]) -> VerbFiles {
    VerbFiles {
        verb,
        inputs: &[],
        outputs,
        fresh: false,
    }
}

const fn writes_new(verb: &'static str, outputs: &'static [&'static str]) -> VerbFiles {
    VerbFiles {
        verb,
        inputs: &[],
        outputs,
        fresh: true,
    }
}

const fn plain(verb: &'static str) -> VerbFiles {
    VerbFiles {
        verb,
        inputs: &[],
        outputs: &[],
        fresh: false,
    }
}

/// Every verb the admin API may run (the server's role table decides WHO may), with its files.
pub const REMOTE_VERBS: &[VerbFiles] = &[
    plain("status"),
    plain("pki trust-version"),
    plain("pki rotate-command-root"),
    reads("batch create", &["leaves"]),
    plain("batch show"),
    plain("batch cancel"),
    plain("batch scope"),
    plain("batch list"),
    plain("batch submit-approval"),
    writes_new("audit export", &["out"]),
    plain("audit seal"),
    writes("audit prove", &["out"]),
    reads("command run", &["payload_file"]),
    plain("command list"),
    plain("command show"),
    writes_new("token create", &["out"]),
    plain("token list"),
    plain("token revoke"),
    plain("node list"),
    plain("node show"),
    plain("node revoke"),
    plain("node delete"),
    plain("node retire"),
    plain("node names set"),
    plain("node names add"),
    plain("node names remove"),
    plain("node names show"),
    // --out is a directory: the reply's files are inside it.
    writes("node config", &["out"]),
    plain("node install-script"),
    plain("pool create"),
    plain("pool show"),
    plain("pool list"),
    plain("pool update"),
    plain("join-request list"),
    plain("join-request show"),
    plain("join-request approve"),
    plain("join-request reject"),
    plain("attestor entry add"),
    plain("attestor entry list"),
    plain("attestor entry remove"),
    plain("tpm allow"),
    plain("tpm list"),
    plain("tpm revoke"),
    plain("site create"),
    plain("site list"),
    plain("site show"),
    plain("site boot add"),
    plain("site boot list"),
    plain("site boot remove"),
    plain("site lease fence"),
    plain("cloud account add"),
    plain("cloud account list"),
    plain("cloud account remove"),
    plain("bundle show"),
    plain("events list"),
    plain("events show"),
    plain("tenant create"),
    plain("tenant list"),
    plain("tenant show"),
    plain("tenant delete"),
    plain("oidc keys list"),
    plain("oidc keys add"),
    plain("oidc keys promote"),
    plain("oidc keys retire"),
    plain("oidc discovery"),
    plain("operator list"),
    plain("operator revoke"),
    plain("ssh ca"),
    VerbFiles {
        verb: "ssh issue",
        inputs: &["public_key"],
        outputs: &["out"],
        fresh: false,
    },
    plain("ssh list"),
    plain("ssh revoke"),
    writes("ssh krl", &["out"]),
];

/// Verbs that run only against the store directly (bootstrap and offline work): `--server`
/// is refused for them with exit 2 ([`COMPOSITES`] excepted).
pub const DIRECT_ONLY: &[&str] = &[
    "up",
    "serve",
    "migrate",
    "rebuild",
    "replay",
    "doctor",
    "healthcheck",
    "config template serve",
    "pki init",
    "pki show",
    "pki issue-internal",
    "pki renew-ca",
    "pki reseal",
    "pki issue-gateway",
    "pki add-operator-ca",
    "pki add-ssh-ca",
    "pki issue-operator",
    "pki crl",
    "batch keygen",
    "batch sign-approvers",
    "batch approve",
    "audit verify",
    "audit verify-proof",
];

/// Verbs not sent as one call that still take `--server`/`--profile`: they run locally and
/// use the flags themselves (`batch approve` calls the API several times and signs locally;
/// `pki issue-operator --server` is the address it writes into the profile).
pub const COMPOSITES: &[&str] = &["batch approve", "pki issue-operator"];

/// Path-valued arguments of remotable verbs that do not name a caller's file: the
/// deployment's own flags (refused by the server) and paths on a node.
pub const NOT_FILES: &[(&str, &str)] = &[
    ("*", "dir"),
    ("*", "config"),
    ("*", "pki"),
    ("*", "profile"),
    ("node config", "data_dir"),
    ("node install-script", "data_dir"),
    ("node install-script", "etc"),
];

/// The `--help` line of a direct-store-only verb.
pub const DIRECT_ONLY_HELP: &str =
    "Direct-store only: bootstrap and offline work, run against the store, never through the admin API.";

/// The table entry of a remotable verb.
pub fn entry(verb: &str) -> Option<&'static VerbFiles> {
    REMOTE_VERBS.iter().find(|v| v.verb == verb)
}

/// Whether the admin API may run `verb` ("token create").
pub fn remotable(verb: &str) -> bool {
    entry(verb).is_some()
}

/// The flags (clap ids) of `verb` that name files it reads on the caller's machine.
pub fn input_flags(verb: &str) -> &'static [&'static str] {
    entry(verb).map(|v| v.inputs).unwrap_or(&[])
}

/// The flags (clap ids) of `verb` that name files it writes on the caller's machine.
pub fn output_flags(verb: &str) -> &'static [&'static str] {
    entry(verb).map(|v| v.outputs).unwrap_or(&[])
}

/// Whether `verb`'s outputs must not exist yet ([`VerbFiles::fresh`]).
pub fn fresh_outputs(verb: &str) -> bool {
    entry(verb).is_some_and(|v| v.fresh)
}

/// The leaf of a parsed command line: the verb's path ("token create") and its matches.
pub fn leaf(matches: &clap::ArgMatches) -> (String, &clap::ArgMatches) {
    let mut words = Vec::new();
    let mut at = matches;
    while let Some((name, sub)) = at.subcommand() {
        words.push(name.to_string());
        at = sub;
    }
    (words.join(" "), at)
}

/// The values of `flags` in `leaf` as paths (`-` left out: standard input/output).
pub fn paths_of(leaf: &clap::ArgMatches, flags: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for id in flags {
        let Ok(Some(values)) = leaf.try_get_raw(id) else {
            continue;
        };
        for v in values {
            let p = PathBuf::from(v);
            if p.as_os_str() != "-" && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The caller's files `verb` reads, as `leaf` names them.
pub fn input_paths(verb: &str, leaf: &clap::ArgMatches) -> Vec<PathBuf> {
    paths_of(leaf, input_flags(verb))
}

/// Every leaf verb of `cmd` with its arguments, for the coverage tests.
pub fn leaf_verbs(cmd: &clap::Command) -> Vec<(String, Vec<clap::Arg>)> {
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Vec<(String, Vec<clap::Arg>)>) {
        let subs: Vec<_> = cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .collect();
        if subs.is_empty() {
            out.push((path.join(" "), cmd.get_arguments().cloned().collect()));
            return;
        }
        for s in subs {
            path.push(s.get_name().to_string());
            walk(s, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(cmd, &mut Vec::new(), &mut out);
    out
}

/// Whether `arg` takes a path (its value parser yields a `PathBuf`).
pub fn is_path_arg(arg: &clap::Arg) -> bool {
    arg.get_value_parser().type_id() == clap::value_parser!(PathBuf).type_id()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> Vec<(String, Vec<clap::Arg>)> {
        leaf_verbs(&crate::admin::remote::command())
    }

    #[test]
    fn every_verb_is_remotable_or_direct_only_and_not_both() {
        let mut undecided = Vec::new();
        for (verb, _) in tree() {
            let remote = remotable(&verb);
            let direct = DIRECT_ONLY.contains(&verb.as_str());
            assert!(!(remote && direct), "{verb} is in both lists");
            if !remote && !direct {
                undecided.push(verb);
            }
        }
        assert!(
            undecided.is_empty(),
            "verbs in neither REMOTE_VERBS nor DIRECT_ONLY of cli/src/admin/files.rs (decide \
             whether the admin API runs them, and which flags name the caller's files): {undecided:?}"
        );
    }

    #[test]
    fn every_path_argument_of_a_remotable_verb_is_in_the_table() {
        let mut missing = Vec::new();
        for (verb, args) in tree() {
            let Some(e) = entry(&verb) else { continue };
            for arg in args.iter().filter(|a| is_path_arg(a)) {
                let id = arg.get_id().as_str();
                let listed = e.inputs.contains(&id)
                    || e.outputs.contains(&id)
                    || NOT_FILES
                        .iter()
                        .any(|(v, a)| (*v == "*" || *v == verb) && *a == id);
                if !listed {
                    missing.push(format!("{verb} --{id}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "path arguments of remotable verbs that cli/src/admin/files.rs does not name as an \
             input, an output or not a file (they would read or write the SERVER's disk): {missing:?}"
        );
    }

    #[test]
    fn the_tables_name_flags_the_verbs_have() {
        let verbs = tree();
        for e in REMOTE_VERBS {
            let Some((_, args)) = verbs.iter().find(|(v, _)| v == e.verb) else {
                continue; // a verb another branch adds (batch scope, operator list, …)
            };
            for id in e.inputs.iter().chain(e.outputs) {
                assert!(
                    args.iter().any(|a| a.get_id().as_str() == *id),
                    "{}: no argument {id}",
                    e.verb
                );
            }
        }
        for c in COMPOSITES {
            assert!(DIRECT_ONLY.contains(c), "{c}");
        }
    }

    #[test]
    fn input_paths_follow_the_command_line() {
        let m = crate::admin::remote::command()
            .try_get_matches_from([
                "bcctl",
                "command",
                "run",
                "--node",
                "n1",
                "--kind",
                "reboot",
                "--payload-file",
                "p.json",
            ])
            .expect("parses");
        let (verb, leaf) = super::leaf(&m);
        assert_eq!(verb, "command run");
        assert_eq!(input_paths(&verb, leaf), vec![PathBuf::from("p.json")]);
        let m = crate::admin::remote::command()
            .try_get_matches_from([
                "bcctl",
                "audit",
                "prove",
                "--tenant",
                "t",
                "--position",
                "1",
                "--out",
                "-",
            ])
            .expect("parses");
        let (verb, leaf) = super::leaf(&m);
        assert!(
            paths_of(leaf, output_flags(&verb)).is_empty(),
            "- is stdout"
        );
    }
}
