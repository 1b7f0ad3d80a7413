//! Where `bcd join` takes its join token from, and never from.
//!
//! One source, in this order:
//!
//! 1. `--token-file PATH`: a regular file (not a symlink), mode 0600 or 0400, at most 4 KiB; its
//!    first line is the token. The file is deleted once the join succeeded
//!    ([`TokenInput::consume`]), or when the machine had already joined ([`discard_token_file`]);
//!    on a read-only mount that deletion is a warning, not a failure.
//! 2. `BCD_JOIN_TOKEN`, removed from the environment as soon as it is read.
//! 3. The first line of standard input, at most 4 KiB; a terminal is refused (typing a token
//!    would echo it).
//!
//! `BCD_JOIN_TOKEN` is removed from the environment whichever source is used, so no child process
//! ever inherits it. The token is never taken from the command line; `main` refuses a positional
//! argument without echoing it. No error message here contains the token.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufRead, IsTerminal, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use domain::pki::TokenSecret;

/// The environment variable a token may come in.
pub const TOKEN_ENV: &str = "BCD_JOIN_TOKEN";
/// The most bytes read for a token (a line of standard input or a token file).
pub const MAX_TOKEN_INPUT: usize = 4096;

/// Why no usable token was read.
#[derive(Debug, thiserror::Error)]
pub enum TokenInputError {
    /// No source gave a token.
    #[error(
        "no join token: set {TOKEN_ENV}, pass it on standard input (bcd join < token.txt), \
         or use --token-file PATH"
    )]
    NoToken,
    /// Standard input is a terminal.
    #[error(
        "standard input is a terminal and typing a token would show it: set {TOKEN_ENV}, \
         pipe it (bcd join < token.txt), or use --token-file PATH"
    )]
    Terminal,
    /// More than 4 KiB on the first line, or in the file.
    #[error("the join token from {source_name} is longer than 4 KiB; is it the right input?")]
    TooLong {
        /// Where it came from.
        source_name: String,
    },
    /// Not `bcjt_...`.
    #[error(
        "the join token from {source_name} is malformed: a join token is bcjt_ followed by 43 \
         base64url characters (copy it again from `bcctl token create`)"
    )]
    Malformed {
        /// Where it came from.
        source_name: String,
    },
    /// Not valid UTF-8.
    #[error("the join token from {source_name} is not text")]
    NotText {
        /// Where it came from.
        source_name: String,
    },
    /// The token file is not a regular file (a symlink, a directory, a device...).
    #[error("--token-file {path}: not a regular file (symlinks are refused)")]
    NotRegularFile {
        /// The path.
        path: PathBuf,
    },
    /// The token file's mode lets others read or change it.
    #[error(
        "--token-file {path}: mode {mode:04o}; a token file must be 0600 or 0400 \
         (chmod 0600 {path})"
    )]
    BadMode {
        /// The path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The token file could not be read.
    #[error("--token-file {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Standard input could not be read.
    #[error("reading the join token from standard input: {0}")]
    Stdin(std::io::Error),
}

/// Where the token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `BCD_JOIN_TOKEN`.
    Env,
    /// The first line of standard input.
    Stdin,
    /// `--token-file`.
    File(PathBuf),
}

impl TokenSource {
    fn name(&self) -> String {
        match self {
            TokenSource::Env => TOKEN_ENV.to_owned(),
            TokenSource::Stdin => "standard input".to_owned(),
            TokenSource::File(p) => format!("--token-file {}", p.display()),
        }
    }
}

/// A token read from its one source.
#[derive(Debug)]
pub struct TokenInput {
    /// The token.
    pub secret: TokenSecret,
    /// Its source.
    pub source: TokenSource,
}

/// What a deleted or kept token file came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Consumed {
    /// Nothing to delete (the token did not come from a file).
    NothingToDelete,
    /// The token file was deleted.
    Deleted(PathBuf),
    /// The file could not be deleted (a read-only mount): a warning for the log.
    Kept {
        /// The path.
        path: PathBuf,
        /// Why, for the warning.
        warning: String,
    },
}

impl TokenInput {
    /// Once the join succeeded: deletes the token file, if the token came from one.
    pub fn consume(self) -> Consumed {
        match self.source {
            TokenSource::File(path) => delete_token_file(&path),
            _ => Consumed::NothingToDelete,
        }
    }
}

fn delete_token_file(path: &Path) -> Consumed {
    match fs::remove_file(path) {
        Ok(()) => Consumed::Deleted(path.to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Consumed::NothingToDelete,
        Err(e) => Consumed::Kept {
            path: path.to_owned(),
            warning: format!(
                "warning: --token-file {}: could not delete it ({e}); delete it by hand",
                path.display()
            ),
        },
    }
}

/// On a machine that had already joined: deletes a regular `--token-file` without reading it.
pub fn discard_token_file(path: &Path) -> Consumed {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() => delete_token_file(path),
        _ => Consumed::NothingToDelete,
    }
}

/// Access to the process environment, so tests can supply their own.
pub trait TokenEnv {
    /// Reads `name` and removes it from the environment.
    fn take(&mut self, name: &str) -> Option<OsString>;
}

/// The real process environment.
#[derive(Debug, Default)]
pub struct ProcessEnv;

impl TokenEnv for ProcessEnv {
    fn take(&mut self, name: &str) -> Option<OsString> {
        let value = std::env::var_os(name);
        if value.is_some() {
            // bcd reads the token at start, before it starts any thread.
            std::env::remove_var(name);
        }
        value
    }
}

/// Standard input, or a stand-in for tests.
pub trait TokenStdin: BufRead {
    /// Whether it is a terminal.
    fn is_terminal(&self) -> bool;
}

impl TokenStdin for std::io::StdinLock<'_> {
    fn is_terminal(&self) -> bool {
        std::io::stdin().is_terminal()
    }
}

impl TokenStdin for std::io::Cursor<Vec<u8>> {
    fn is_terminal(&self) -> bool {
        false
    }
}

fn parse(bytes: &[u8], source: TokenSource) -> Result<TokenInput, TokenInputError> {
    let text = std::str::from_utf8(bytes).map_err(|_| TokenInputError::NotText {
        source_name: source.name(),
    })?;
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Err(TokenInputError::NoToken);
    }
    let secret = TokenSecret::parse(line).map_err(|_| TokenInputError::Malformed {
        source_name: source.name(),
    })?;
    Ok(TokenInput { secret, source })
}

/// Reads at most [`MAX_TOKEN_INPUT`] bytes of the first line; longer is refused.
fn read_first_line(input: &mut dyn BufRead) -> Result<Vec<u8>, TokenInputError> {
    let mut line = Vec::new();
    input
        .take(MAX_TOKEN_INPUT as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(TokenInputError::Stdin)?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    if line.len() > MAX_TOKEN_INPUT {
        return Err(TokenInputError::TooLong {
            source_name: TokenSource::Stdin.name(),
        });
    }
    Ok(line)
}

fn read_token_file(path: &Path) -> Result<Vec<u8>, TokenInputError> {
    let io = |source| TokenInputError::Io {
        path: path.to_owned(),
        source,
    };
    let before = fs::symlink_metadata(path).map_err(io)?;
    if !before.file_type().is_file() {
        return Err(TokenInputError::NotRegularFile {
            path: path.to_owned(),
        });
    }
    let file = File::open(path).map_err(io)?;
    // Checked again on the open file, so a swap between the two calls is caught.
    let meta = file.metadata().map_err(io)?;
    if !meta.file_type().is_file() || meta.ino() != before.ino() || meta.dev() != before.dev() {
        return Err(TokenInputError::NotRegularFile {
            path: path.to_owned(),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode != 0o600 && mode != 0o400 {
        return Err(TokenInputError::BadMode {
            path: path.to_owned(),
            mode,
        });
    }
    let too_long = || TokenInputError::TooLong {
        source_name: TokenSource::File(path.to_owned()).name(),
    };
    if meta.len() > MAX_TOKEN_INPUT as u64 {
        return Err(too_long());
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_INPUT as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > MAX_TOKEN_INPUT {
        return Err(too_long());
    }
    Ok(bytes)
}

/// Reads the join token from its one source (see the module documentation).
pub fn read_token(
    token_file: Option<&Path>,
    env: &mut dyn TokenEnv,
    stdin: &mut dyn TokenStdin,
) -> Result<TokenInput, TokenInputError> {
    // Always dropped, whichever source wins.
    let from_env = env.take(TOKEN_ENV).filter(|v| !v.is_empty());
    if let Some(path) = token_file {
        let bytes = read_token_file(path)?;
        return parse(&bytes, TokenSource::File(path.to_owned()));
    }
    if let Some(value) = from_env {
        let value = value.into_string().map_err(|_| TokenInputError::NotText {
            source_name: TOKEN_ENV.to_owned(),
        })?;
        if value.len() > MAX_TOKEN_INPUT {
            return Err(TokenInputError::TooLong {
                source_name: TOKEN_ENV.to_owned(),
            });
        }
        return parse(value.as_bytes(), TokenSource::Env);
    }
    if stdin.is_terminal() {
        return Err(TokenInputError::Terminal);
    }
    let line = read_first_line(stdin)?;
    parse(&line, TokenSource::Stdin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io::Cursor;

    #[derive(Default)]
    struct FakeEnv(HashMap<String, OsString>);

    impl TokenEnv for FakeEnv {
        fn take(&mut self, name: &str) -> Option<OsString> {
            self.0.remove(name)
        }
    }

    fn token() -> String {
        TokenSecret::generate().unwrap().expose().to_owned()
    }

    #[test]
    fn env_first_and_removed() {
        let t = token();
        let mut env = FakeEnv::default();
        env.0.insert(TOKEN_ENV.into(), t.clone().into());
        let mut stdin = Cursor::new(b"ignored\n".to_vec());
        let got = read_token(None, &mut env, &mut stdin).unwrap();
        assert_eq!(got.secret.expose(), t);
        assert_eq!(got.source, TokenSource::Env);
        assert!(env.0.is_empty());
    }

    #[test]
    fn stdin_first_line_and_limits() {
        let t = token();
        let mut stdin = Cursor::new(format!("{t}\nsecond line\n").into_bytes());
        let got = read_token(None, &mut FakeEnv::default(), &mut stdin).unwrap();
        assert_eq!(got.secret.expose(), t);
        assert_eq!(got.source, TokenSource::Stdin);

        let mut long = Cursor::new(vec![b'a'; MAX_TOKEN_INPUT + 1]);
        assert!(matches!(
            read_token(None, &mut FakeEnv::default(), &mut long),
            Err(TokenInputError::TooLong { .. })
        ));
        let mut empty = Cursor::new(Vec::new());
        assert!(matches!(
            read_token(None, &mut FakeEnv::default(), &mut empty),
            Err(TokenInputError::NoToken)
        ));
        let mut bad = Cursor::new(b"bcjt_nope\n".to_vec());
        let err = read_token(None, &mut FakeEnv::default(), &mut bad).unwrap_err();
        assert!(!err.to_string().contains("bcjt_nope"));
    }
}
