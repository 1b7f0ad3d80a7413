//! `bcctl <verb> … --server HOST:PORT [--profile FILE]`: what `main` does when a verb's
//! deployment flags ask for the admin API instead of the store.
//!
//! 1. [`plan`] looks at the parsed command line: no `--server`/`--profile` → direct mode (the
//!    verb opens the store; `BCCTL_PROFILE` alone never makes a call remote). A verb the admin
//!    API does not run ([`files::DIRECT_ONLY`]) is refused with exit 2. A composite
//!    ([`files::COMPOSITES`]: `batch approve`, `pki issue-operator`) runs locally and uses the
//!    flags itself.
//! 2. The call's argv is the process's arguments without the program name and without
//!    `--server X` / `--profile X` / `--server=X` / `--profile=X` ([`strip_remote_flags`]);
//!    its inputs are the files `files.rs` names for the verb, read here.
//! 3. [`call`] sends it, prints the reply's standard output and error byte for byte, writes
//!    the returned files (only at or under the paths the command line named for the verb's
//!    outputs; with the reply's mode), and exits with the reply's exit code. A refusal (gRPC
//!    status) or a transport failure is exit 1, `bcctl: <message>` (JSON under `--json`).

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;

use super::client::{ClientError, Remote};
use super::files;
use crate::command_line::failure::Failure;
use crate::deployment::RemoteArgs;

/// The flags the client consumes (never sent to the server).
const REMOTE_FLAGS: [&str; 2] = ["--server", "--profile"];

/// `bcctl`'s command tree as `main` parses it: [`crate::command_line::Cli`] with the direct-store-only verbs
/// marked in their `--help`.
pub fn command() -> clap::Command {
    let mut cmd = crate::command_line::Cli::command();
    for verb in files::DIRECT_ONLY {
        let words: Vec<&str> = verb.split(' ').collect();
        cmd = mark(cmd, &words);
    }
    cmd
}

fn mark(cmd: clap::Command, words: &[&str]) -> clap::Command {
    match words {
        [] => {
            let text = match cmd.get_after_help() {
                Some(h) => format!("{h}\n\n{}", files::DIRECT_ONLY_HELP),
                None => files::DIRECT_ONLY_HELP.to_string(),
            };
            cmd.after_help(text)
        }
        [first, rest @ ..] => {
            if cmd.find_subcommand(first).is_none() {
                return cmd;
            }
            cmd.mut_subcommand(*first, |sub| mark(sub, rest))
        }
    }
}

/// The message a direct-store-only verb given `--server` exits 2 with.
pub fn direct_only_message(verb: &str) -> String {
    format!(
        "`{verb}` runs only against the store directly (bootstrap and offline work); drop --server"
    )
}

/// For a command line the parser refused: when it gave `--server`/`--profile` to a
/// direct-store-only verb that has no deployment flags at all (`up`, `serve`), the refusal
/// that names the verb (exit 2) instead of clap's "unexpected argument".
pub fn refused_remote_flag(args: &[OsString]) -> Option<String> {
    let words: Vec<&str> = args.iter().skip(1).filter_map(|a| a.to_str()).collect();
    let flagged = words.iter().take_while(|w| **w != "--").any(|w| {
        REMOTE_FLAGS
            .iter()
            .any(|f| *w == *f || w.starts_with(&format!("{f}=")))
    });
    if !flagged {
        return None;
    }
    let mut cmd = crate::command_line::Cli::command();
    let mut path = Vec::new();
    for w in &words {
        match cmd.find_subcommand(w) {
            Some(sub) => {
                path.push(w.to_string());
                cmd = sub.clone();
            }
            None => break,
        }
    }
    let verb = path.join(" ");
    (cmd.get_subcommands().next().is_none()
        && files::DIRECT_ONLY.contains(&verb.as_str())
        && !files::COMPOSITES.contains(&verb.as_str()))
    .then(|| direct_only_message(&verb))
}

/// `args` (without the program name) less the client's own flags, in both the `--flag value`
/// and the `--flag=value` forms; everything after `--` is kept as it is.
pub fn strip_remote_flags(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            out.push(a.clone());
            out.extend(it.cloned());
            break;
        }
        if REMOTE_FLAGS.contains(&a.as_str()) {
            it.next();
            continue;
        }
        if REMOTE_FLAGS
            .iter()
            .any(|f| a.strip_prefix(f).is_some_and(|rest| rest.starts_with('=')))
        {
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// One call to make.
pub struct Plan {
    pub remote: Remote,
    pub verb: String,
    pub argv: Vec<String>,
    pub inputs: Vec<(PathBuf, Vec<u8>)>,
    /// The paths the command line names for the verb's outputs: returned files must be these
    /// or inside them.
    pub outputs: Vec<PathBuf>,
    /// The outputs are created new, never over an existing file.
    pub fresh: bool,
}

/// What the parsed command line asks for: `None` runs the verb directly.
pub fn plan(args: &[OsString], matches: &clap::ArgMatches) -> Result<Option<Plan>, Failure> {
    let (verb, leaf) = files::leaf(matches);
    let remote_args = RemoteArgs {
        server: leaf.try_get_one::<String>("server").ok().flatten().cloned(),
        profile: leaf
            .try_get_one::<PathBuf>("profile")
            .ok()
            .flatten()
            .cloned(),
    };
    if !remote_args.is_remote() || files::COMPOSITES.contains(&verb.as_str()) {
        return Ok(None);
    }
    if !files::remotable(&verb) {
        return Err(Failure::usage(direct_only_message(&verb)));
    }
    let mut words = Vec::with_capacity(args.len());
    for a in args.iter().skip(1) {
        match a.to_str() {
            Some(s) => words.push(s.to_string()),
            None => {
                return Err(Failure::usage(format!(
                    "argument {a:?} is not UTF-8: the admin API takes text arguments"
                )))
            }
        }
    }
    let argv = strip_remote_flags(&words);
    let mut inputs = Vec::new();
    for path in files::input_paths(&verb, leaf) {
        let bytes = std::fs::read(&path).map_err(|e| {
            Failure::from(format!(
                "cannot read {}: {e} (`{verb}` reads it on this machine and sends it with the call)",
                path.display()
            ))
        })?;
        inputs.push((path, bytes));
    }
    let outputs = files::paths_of(leaf, files::output_flags(&verb));
    let fresh = files::fresh_outputs(&verb);
    if fresh {
        if let Some(p) = outputs.iter().find(|p| p.exists()) {
            return Err(Failure::from(format!(
                "{} already exists: `{verb}` never overwrites a file (move it away first)",
                p.display()
            )));
        }
    }
    let remote = Remote::from_args(&remote_args)
        .map_err(failure)?
        .ok_or_else(|| Failure::usage("--server or --profile is needed for an admin API call"))?;
    Ok(Some(Plan {
        remote,
        verb,
        argv,
        inputs,
        outputs,
        fresh,
    }))
}

/// A client error as `main` reports it: its exit code (1, or 2 for a malformed --server).
pub fn failure(e: ClientError) -> Failure {
    Failure::coded(e.to_string(), e.exit_code())
}

/// Whether `path` (a returned file) is one of `outputs` or inside one, without `..`.
pub fn allowed_output(path: &Path, outputs: &[PathBuf]) -> bool {
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return false;
    }
    outputs.iter().any(|o| path == o || path.starts_with(o))
}

/// Writes one returned file: parents created for a file inside an output directory, the mode
/// set even when the file existed.
fn write_returned(path: &Path, contents: &[u8], mode: u32, fresh: bool) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut options = std::fs::OpenOptions::new();
    if fresh {
        options.write(true).create_new(true);
    } else {
        options.write(true).create(true).truncate(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    let mut file = options.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
    }
    file.write_all(contents)?;
    file.sync_all()
}

/// Makes the call and mirrors its reply (module doc, step 3).
pub async fn call(plan: Plan, json: bool) -> ExitCode {
    let fail = |e: Failure| {
        crate::output::print_error(&e.message, e.code, json);
        ExitCode::from(e.code)
    };
    let mut client = match plan.remote.connect().await {
        Ok(c) => c,
        Err(e) => return fail(failure(e)),
    };
    let reply = match client.run(&plan.argv, plan.inputs).await {
        Ok(r) => r,
        Err(e) => return fail(failure(e)),
    };
    for file in &reply.files {
        let path = PathBuf::from(&file.path);
        if !allowed_output(&path, &plan.outputs) {
            return fail(Failure::from(format!(
                "the server returned a file {} that the command line did not name as `{}`'s output: not written",
                path.display(),
                plan.verb
            )));
        }
        if let Err(e) = write_returned(&path, &file.contents, file.mode, plan.fresh) {
            return fail(Failure::from(format!(
                "cannot write {}: {e}",
                path.display()
            )));
        }
    }
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&reply.stdout);
        let _ = out.flush();
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&reply.stderr);
        let _ = err.flush();
    }
    ExitCode::from(u8::try_from(reply.exit_code).unwrap_or(crate::output::EXIT_FAILED))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn the_remote_flags_are_stripped_in_both_forms() {
        assert_eq!(
            strip_remote_flags(&v(&[
                "token",
                "create",
                "--server",
                "h:1",
                "--json",
                "--profile=p.toml",
                "--out",
                "f"
            ])),
            v(&["token", "create", "--json", "--out", "f"])
        );
        assert_eq!(
            strip_remote_flags(&v(&["token", "list", "--server=h:1", "--profile", "p"])),
            v(&["token", "list"])
        );
        assert_eq!(
            strip_remote_flags(&v(&["x", "--serverx", "--", "--server", "y"])),
            v(&["x", "--serverx", "--", "--server", "y"])
        );
    }

    #[test]
    fn returned_files_stay_at_or_under_the_named_outputs() {
        let outs = vec![PathBuf::from("out/dir"), PathBuf::from("token.txt")];
        assert!(allowed_output(Path::new("token.txt"), &outs));
        assert!(allowed_output(Path::new("out/dir/config.toml"), &outs));
        assert!(!allowed_output(Path::new("out/dir/../../etc/x"), &outs));
        assert!(!allowed_output(Path::new("other"), &outs));
        assert!(!allowed_output(Path::new("token.txt.bak"), &outs));
    }
}
