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
}

const fn reads(verb: &'static str, inputs: &'static [&'static str]) -> VerbFiles {
    VerbFiles {
        verb,
        inputs,
        outputs: &[],
    }
}

const fn writes(verb: &'static str, outputs: &'static [&'static str]) -> VerbFiles {
    VerbFiles {
        verb,
        inputs: &[],
        outputs,
    }
}

const fn plain(verb: &'static str) -> VerbFiles {
    VerbFiles {
        verb,
        inputs: &[],
        outputs: &[],
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
    writes("audit export", &["out"]),
    plain("audit seal"),
    writes("audit prove", &["out"]),
    reads("command run", &["payload_file"]),
    plain("command list"),
    plain("command show"),
    writes("token create", &["out"]),
    plain("token list"),
    plain("token revoke"),
    plain("node list"),
    plain("node show"),
    plain("node revoke"),
    plain("node delete"),
    plain("node retire"),
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
    plain("tenant list"),
    plain("operator list"),
    plain("operator revoke"),
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
    "pki issue-operator",
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
    "Direct-store only: bootstrap and offline work (refuses --server).";

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
    use clap::CommandFactory;

    #[test]
    fn print_tree() {
        for (verb, args) in leaf_verbs(&crate::Cli::command()) {
            let paths: Vec<_> = args
                .iter()
                .filter(|a| is_path_arg(a))
                .map(|a| a.get_id().to_string())
                .collect();
            println!("VERB {verb} :: {paths:?}");
        }
    }
}
