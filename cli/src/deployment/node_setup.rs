//! What a node needs from the control plane before `bcd join`: bcd's `config.toml` (the server,
//! the data directory, the serving CA pin, the two JoinService pins, the approver-set pin once a
//! quorum exists), the two JoinService public keys as JWKs beside it (`join-encryption.jwk`,
//! `join-signing.jwk`), and the serving CA certificate as PEM.
//!
//! `bcctl up`, `bcctl node config --out DIR` and `bcctl node install-script` all build these
//! files here, from the bundle's public half only: no private key is opened. The join step they
//! print passes the token in a file (`--token-file`, mode 0600, deleted by bcd after the join) or
//! on standard input, never on the command line.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use domain::attest::ids;
use domain::pki::{PublicBundle, PublicKey};

use crate::deployment::node_units::{unit_for, ETC_PLACEHOLDER, HELPER_UNIT, NODE_UNIT};
use serde_json::json;

/// bcd's configuration file name.
pub const CONFIG_FILE: &str = "config.toml";
/// The JoinService encryption key's file (bcd reads it beside `config.toml`).
pub const ENCRYPTION_JWK: &str = "join-encryption.jwk";
/// The JoinService signing key's file (bcd reads it beside `config.toml`).
pub const SIGNING_JWK: &str = "join-signing.jwk";
/// The serving CA certificate (for clients that pin by certificate rather than by key).
pub const SERVING_CA_PEM: &str = "serving-ca.pem";
/// Where `bcctl up` and the printed join step keep a token for `bcd join --token-file`.
pub const TOKEN_FILE: &str = "join-token";
/// bcd's default configuration directory.
pub const DEFAULT_ETC: &str = "/etc/bcd";
/// bcd's default data directory.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/bcd";

/// Why node setup files could not be written.
#[derive(Debug, thiserror::Error)]
pub enum NodeSetupError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the PKI bundle's public half: {0}")]
    Bundle(String),
    #[error("--approver-set-sha256 {0:?}: expected 64 hex characters (approverSetSha256 of `bcctl pki trust-version --json`)")]
    BadApproverSet(String),
}

/// Everything a node's configuration holds.
#[derive(Clone, Debug)]
pub struct NodeSetup {
    /// host:port of the JoinService and gateway.
    pub server: String,
    /// bcd's data directory on the node.
    pub data_dir: PathBuf,
    pub serving_ca_pin: String,
    pub join_encryption_pin: String,
    pub join_signing_pin: String,
    /// The approver set the node takes first (64 hex), once the quorum exists.
    pub approver_set_sha256: Option<String>,
    /// Whether `approver_set_sha256` was given (`--approver-set-sha256`): the install script then
    /// replaces an earlier pin; the published default never does (spec 003: "an upgrade run
    /// without the flag keeps an existing pin").
    pub approver_set_given: bool,
    /// The attestor `bcd join` is told to use (`--attestor`); none: bcd's default (join-token).
    pub attestor: Option<String>,
    /// `[helper] user`: the privilege split (bcd node as this user, bcd helper as root).
    pub helper_user: Option<String>,
    /// `[site] listen`: `bcd site`'s iPXE server address (bcd has no default for it).
    pub site_listen: Option<String>,
    pub join_encryption_jwk: String,
    pub join_signing_jwk: String,
    pub serving_ca_pem: String,
}

/// A P-256 public key as a JWK (what bcd reads from `join-*.jwk`).
pub fn jwk(key: &PublicKey) -> String {
    let p = key.uncompressed_point();
    json!({
        "kty": "EC",
        "crv": "P-256",
        "x": URL_SAFE_NO_PAD.encode(&p[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&p[33..65]),
    })
    .to_string()
}

/// DER as a PEM block.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Checks an `--approver-set-sha256` value: 64 hex characters, kept in lower case.
pub fn approver_set(hex_text: &str) -> Result<String, NodeSetupError> {
    let t = hex_text.trim();
    if t.len() == 64 && t.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(t.to_ascii_lowercase())
    } else {
        Err(NodeSetupError::BadApproverSet(hex_text.to_string()))
    }
}

impl NodeSetup {
    /// The setup of a node of the deployment whose public half is `public`.
    pub fn new(
        public: &PublicBundle,
        server: String,
        data_dir: PathBuf,
    ) -> Result<Self, NodeSetupError> {
        let pins = public
            .pins()
            .map_err(|e| NodeSetupError::Bundle(e.to_string()))?;
        Ok(NodeSetup {
            server,
            data_dir,
            serving_ca_pin: pins.serving_ca.to_string(),
            join_encryption_pin: pins.join_encryption.to_string(),
            join_signing_pin: pins.join_signing.to_string(),
            approver_set_sha256: None,
            approver_set_given: false,
            attestor: None,
            helper_user: None,
            site_listen: None,
            join_encryption_jwk: jwk(&public.join_encryption),
            join_signing_jwk: jwk(&public.join_signing),
            serving_ca_pem: pem("CERTIFICATE", &public.serving_ca_der),
        })
    }

    /// bcd's `config.toml`.
    pub fn config_toml(&self, written_by: &str) -> String {
        let (head, tail) = self.config_around_pin(written_by);
        let pin = match &self.approver_set_sha256 {
            Some(sha) => format!("{PIN_NOTE_GIVEN}\napprover_set_sha256 = \"{sha}\"\n"),
            None => format!("{NO_PIN_NOTE}\n{NO_PIN_LINE}\n"),
        };
        format!("{head}{pin}{tail}")
    }

    /// `config.toml` before and after its approver set pin's two lines.
    fn config_around_pin(&self, written_by: &str) -> (String, String) {
        let head = format!(
            "# Written by `{written_by}`: bcd's configuration for this deployment.\n\
             # join-encryption.jwk and join-signing.jwk must sit beside this file.\n\
             server = {}\n\
             data_dir = {}\n\
             serving_ca_spki_pin = \"{}\"\n\
             join_encryption_key_pin = \"{}\"\n\
             join_signing_key_pin = \"{}\"\n",
            toml_string(&self.server),
            toml_string(&self.data_dir.display().to_string()),
            self.serving_ca_pin,
            self.join_encryption_pin,
            self.join_signing_pin,
        );
        let mut out = String::new();
        if let Some(a) = &self.attestor {
            out.push_str(&format!(
                "# Join with `bcd join --attestor {a}` (the attestor is a flag of bcd join).\n"
            ));
        }
        if let Some(user) = &self.helper_user {
            out.push_str(&format!(
                "# The privilege split: bcd node runs as this user and reaches the TPM only\n\
                 # through bcd helper (root); bcd join runs as root and hands the identity over.\n\
                 [helper]\n\
                 user = {}\n",
                toml_string(user)
            ));
        }
        if let Some(listen) = &self.site_listen {
            out.push_str(&site_table(listen));
        }
        (head, out)
    }

    /// The script's first lines: the pin an earlier run wrote is read; `--approver-set-sha256`
    /// replaces it (and says so), an upgrade without the flag keeps it (and says so) over the
    /// published default, and an unreadable earlier pin stops the script before anything is
    /// written, rather than be dropped (decision 0099). Sets `BCD_PIN` and `BCD_PIN_NOTE`.
    fn pin_choice_step(&self) -> String {
        let given = self.approver_set_given;
        let pin = self.approver_set_sha256.as_deref().unwrap_or("");
        let mut s = String::from(KEPT_PIN_READ);
        if !given {
            s.push_str(UNREADABLE_PIN_REFUSED);
        }
        s.push_str(&format!(
            "BCD_PIN={pin}\nBCD_PIN_NOTE={}\n",
            shell_quote(PIN_NOTE_GIVEN)
        ));
        if given {
            s.push_str(
                "if [ -n \"$BCD_KEPT_PIN\" ] && [ \"$BCD_KEPT_PIN\" != \"$BCD_PIN\" ]; then\n\
                 \x20 echo \"replaced the approver set pin of the earlier configuration ($BCD_KEPT_PIN) with $BCD_PIN\"\n\
                 fi\n",
            );
        } else {
            s.push_str(&format!(
                "if [ -n \"$BCD_KEPT_PIN\" ]; then\n\
                 \x20 echo \"kept the approver set pin of the earlier configuration: $BCD_KEPT_PIN\"\n\
                 \x20 if [ -n \"$BCD_PIN\" ] && [ \"$BCD_PIN\" != \"$BCD_KEPT_PIN\" ]; then\n\
                 \x20   echo \"(the control plane publishes $BCD_PIN: pass --approver-set-sha256 to bcctl node install-script to take it)\"\n\
                 \x20 fi\n\
                 \x20 BCD_PIN=\"$BCD_KEPT_PIN\"\n\
                 \x20 BCD_PIN_NOTE={}\n\
                 fi\n",
                shell_quote(PIN_NOTE_KEPT)
            ));
        }
        s
    }

    /// The script's lines that write `config.toml` with the pin [`Self::pin_choice_step`] chose.
    fn write_config_step(&self, mode: u32) -> String {
        let (head, tail) = self.config_around_pin("bcctl node install-script");
        let mut s = String::new();
        let tmp = format!("\"$BCD_ETC/{CONFIG_FILE}.tmp\"");
        s.push_str(&heredoc_to(&head, &tmp, ">"));
        s.push_str(&format!(
            "if [ -n \"$BCD_PIN\" ]; then\n\
             \x20 printf '%s\\napprover_set_sha256 = \"%s\"\\n' \"$BCD_PIN_NOTE\" \"$BCD_PIN\" >> {tmp}\n\
             else\n\
             \x20 printf '%s\\n' {} {} >> {tmp}\n\
             fi\n",
            shell_quote(NO_PIN_NOTE),
            shell_quote(NO_PIN_LINE),
        ));
        if !tail.is_empty() {
            s.push_str(&heredoc_to(&tail, &tmp, ">>"));
        }
        s.push_str(&format!(
            "chmod {mode:o} {tmp}\nmv {tmp} \"$BCD_ETC/{CONFIG_FILE}\"\n"
        ));
        s
    }

    /// The files of the node's configuration directory: name, content, mode.
    pub fn files(&self, written_by: &str) -> Vec<(&'static str, String, u32)> {
        vec![
            (CONFIG_FILE, self.config_toml(written_by), 0o644),
            (
                ENCRYPTION_JWK,
                format!("{}\n", self.join_encryption_jwk),
                0o644,
            ),
            (SIGNING_JWK, format!("{}\n", self.join_signing_jwk), 0o644),
            (SERVING_CA_PEM, self.serving_ca_pem.clone(), 0o644),
        ]
    }

    /// Writes the files into `dir` (created), each through a temporary file and a rename.
    /// During an admin API call the files go back to the caller, who writes them in `dir`.
    pub fn write_to(&self, dir: &Path, written_by: &str) -> Result<Vec<PathBuf>, NodeSetupError> {
        let remote = crate::invocation::is_remote();
        if !remote {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let mut written = Vec::new();
        for (name, text, mode) in self.files(written_by) {
            let path = dir.join(name);
            if remote {
                crate::invocation::write_file(&path, text.as_bytes(), mode).map_err(io(&path))?;
            } else {
                write_replace(&path, text.as_bytes(), mode)?;
            }
            written.push(path);
        }
        Ok(written)
    }

    /// Whether the attestor takes a join token (join-token, the default, and provisioned).
    pub fn takes_token(&self) -> bool {
        self.attestor
            .as_deref()
            .is_none_or(|a| a == ids::JOIN_TOKEN || a == ids::PROVISIONED)
    }

    /// The `bcd join` step with the token read from `token_file` (mode 0600; bcd deletes it
    /// once the machine joined); without a token for an attestor that takes none.
    pub fn join_command(&self, bcd: &str, config: &Path, token_file: &Path) -> String {
        let attestor = match &self.attestor {
            Some(a) => format!(" --attestor {}", shell_quote(a)),
            None => String::new(),
        };
        if !self.takes_token() {
            return format!(
                "{} join --config {}{attestor} < /dev/null",
                shell_quote(bcd),
                shell_quote(&config.display().to_string()),
            );
        }
        format!(
            "{} join --config {}{attestor} --token-file {}",
            shell_quote(bcd),
            shell_quote(&config.display().to_string()),
            shell_quote(&token_file.display().to_string()),
        )
    }

    /// Under `[helper]`, the script's last steps: the two units written, the join run as root
    /// (with `BCD_TOKEN_FILE` for an attestor that takes a token, else printed), then
    /// bcd-helper.service and bcd.service enabled and started where systemd runs.
    fn helper_join_and_units(&self, bcd: &str, attestor: &str, user: &str) -> String {
        let mut s = String::from("BCD_SYSTEMD_DIR=\"${BCD_SYSTEMD_DIR:-/etc/systemd/system}\"\n");
        s.push_str("mkdir -p \"$BCD_SYSTEMD_DIR\"\n");
        let data = self.data_dir.display().to_string();
        for (name, unit) in [
            ("bcd-helper.service", HELPER_UNIT),
            ("bcd.service", NODE_UNIT),
        ] {
            let unit = unit_for(unit, bcd, &data, user);
            s.push_str(&write_step("$BCD_SYSTEMD_DIR", name, &unit, 0o644));
            // The configuration directory as this run has it.
            s.push_str(&format!(
                "sed \"s|{ETC_PLACEHOLDER}|$BCD_ETC|g\" \"$BCD_SYSTEMD_DIR/{name}\" > \"$BCD_SYSTEMD_DIR/{name}.tmp\"\n\
                 mv \"$BCD_SYSTEMD_DIR/{name}.tmp\" \"$BCD_SYSTEMD_DIR/{name}\"\n"
            ));
        }
        let join = if self.takes_token() {
            format!(
                "if [ -n \"${{BCD_TOKEN_FILE:-}}\" ]; then\n\
                 \x20 {} join --config \"$BCD_ETC/config.toml\"{attestor} --token-file \"$BCD_TOKEN_FILE\"\n\
                 else\n\
                 \x20 echo \"Join as root with a token from \\`bcctl token create\\` kept in a file (mode 0600):\"\n\
                 \x20 echo \"  {} join --config $BCD_ETC/config.toml{} --token-file /path/to/join-token\"\n\
                 \x20 echo \"then: systemctl enable --now bcd-helper.service bcd.service\"\n\
                 \x20 exit 0\n\
                 fi\n",
                shell_quote(bcd),
                sh_dq(bcd),
                sh_dq(attestor)
            )
        } else {
            format!(
                "{} join --config \"$BCD_ETC/config.toml\"{attestor} < /dev/null\n",
                shell_quote(bcd)
            )
        };
        s.push_str(&join);
        s.push_str(
            "if [ -d /run/systemd/system ]; then\n\
             \x20 systemctl daemon-reload\n\
             \x20 systemctl enable --now bcd-helper.service\n\
             \x20 systemctl enable --now bcd.service\n\
             else\n\
             \x20 echo \"systemd is not running: start bcd helper (root), then bcd node as ",
        );
        s.push_str(&sh_dq(user));
        s.push_str("\"\nfi\n");
        s
    }

    /// A POSIX sh script that writes the configuration under `etc` (modes set), creates the
    /// data directory (0700), and prints the join step, the token read from a file or stdin.
    pub fn install_script(&self, etc: &Path, bcd: &str) -> String {
        let etc_s = etc.display().to_string();
        let mut s = String::new();
        s.push_str("#!/bin/sh\n");
        s.push_str(
            "# Written by `bcctl node install-script`: installs bcd's configuration for this\n",
        );
        s.push_str(
            "# deployment. Run it as the user bcd runs as (root for /etc/bcd and /var/lib/bcd).\n",
        );
        s.push_str(
            "# BCD_ETC overrides the configuration directory; the data directory is the one\n",
        );
        s.push_str("# written into config.toml (bcctl node install-script --data-dir).\n");
        s.push_str("set -eu\n");
        s.push_str(&format!("BCD_ETC=\"${{BCD_ETC:-{}}}\"\n", sh_dq(&etc_s)));
        s.push_str(&self.pin_choice_step());
        if let Some(user) = &self.helper_user {
            s.push_str(&helper_user_steps(user));
        }
        s.push_str("umask 022\n");
        s.push_str("mkdir -p \"$BCD_ETC\"\n");
        for (name, text, mode) in self.files("bcctl node install-script") {
            if name == CONFIG_FILE {
                s.push_str(&self.write_config_step(mode));
            } else {
                s.push_str(&write_step("$BCD_ETC", name, &text, mode));
            }
        }
        let data = self.data_dir.display().to_string();
        s.push_str(&format!(
            "mkdir -p {q}\nchmod 700 {q}\n",
            q = shell_quote(&data)
        ));
        let attestor = match &self.attestor {
            Some(a) => format!(" --attestor {}", shell_quote(a)),
            None => String::new(),
        };
        s.push_str("echo \"bcd is configured in $BCD_ETC (data in ");
        s.push_str(&sh_dq(&data));
        s.push_str(").\"\n");
        if let Some(user) = &self.helper_user {
            s.push_str(&self.helper_join_and_units(bcd, &attestor, user));
            return s;
        }
        if !self.takes_token() {
            s.push_str(&format!(
                "echo \"Join with:  {} join --config $BCD_ETC/config.toml{} < /dev/null\"\n",
                sh_dq(bcd),
                sh_dq(&attestor)
            ));
            return s;
        }
        s.push_str("echo \"Join with a token from \\`bcctl token create\\` kept in a file (mode 0600):\"\n");
        s.push_str(&format!(
            "echo \"  {} join --config $BCD_ETC/config.toml{} --token-file /path/to/join-token\"\n",
            sh_dq(bcd),
            sh_dq(&attestor)
        ));
        s.push_str(&format!(
            "echo \"or on standard input:  {} join --config $BCD_ETC/config.toml{} < /path/to/join-token\"\n",
            sh_dq(bcd),
            sh_dq(&attestor)
        ));
        s
    }
}

/// `[site] listen` in bcd's config.toml.
fn site_table(listen: &str) -> String {
    format!(
        "# `bcd site`'s iPXE boot server (no default: bcd site refuses to start without it).\n\
         [site]\n\
         listen = {}\n",
        toml_string(listen)
    )
}

/// The script's first steps under `[helper]`: root only; the user made when missing
/// (`useradd --system --user-group --no-create-home --shell /usr/sbin/nologin`) and taken out of
/// `tss` when in it (whoever opens the TPM may clear it; bcd helper opens it for bcd node).
fn helper_user_steps(user: &str) -> String {
    let q = shell_quote(user);
    format!(
        "if [ \"$(id -u)\" != 0 ]; then\n\
         \x20 echo \"this script sets up bcd's privilege split (bcd helper as root, bcd node as \
         {dq}): run it as root\" >&2\n\
         \x20 exit 1\n\
         fi\n\
         if ! id -u {q} >/dev/null 2>&1; then\n\
         \x20 useradd --system --user-group --no-create-home --shell /usr/sbin/nologin {q}\n\
         fi\n\
         if id -nG {q} | tr ' ' '\\n' | grep -qx tss; then\n\
         \x20 gpasswd -d {q} tss\n\
         fi\n",
        dq = sh_dq(user)
    )
}

/// The script's lines that write `text` to `<dir>/<name>` (a shell variable naming the
/// directory) with `mode`: a here-document into a temporary file, its mode, then a rename.
fn write_step(dir: &str, name: &str, text: &str, mode: u32) -> String {
    let tmp = format!("\"{dir}/{name}.tmp\"");
    format!(
        "{}chmod {mode:o} {tmp}\nmv {tmp} \"{dir}/{name}\"\n",
        heredoc_to(text, &tmp, ">")
    )
}

/// `config.toml`'s comment over a pin given or published.
const PIN_NOTE_GIVEN: &str =
    "# The first approver set this node takes (approverSetSha256 of `bcctl pki trust-version`).";
/// `config.toml`'s comment over a pin an upgrade kept.
const PIN_NOTE_KEPT: &str =
    "# The first approver set this node takes, kept from the earlier configuration.";
/// `config.toml`'s two lines without a pin.
const NO_PIN_NOTE: &str = "# No quorum yet: once one is published, add its approverSetSha256 (`bcctl pki trust-version --json`).";
const NO_PIN_LINE: &str = "# approver_set_sha256 = \"<64 hex>\"";

/// Before anything is written: the approver set pin of the configuration an earlier run wrote
/// (lower case), if it has a well-formed one.
const KEPT_PIN_READ: &str = "BCD_KEPT_PIN=\"\"\n\
if [ -f \"$BCD_ETC/config.toml\" ]; then\n\
\x20 BCD_KEPT_PIN=$(sed -n 's/^approver_set_sha256 = \"\\([0-9a-fA-F]\\{64\\}\\)\"$/\\1/p' \"$BCD_ETC/config.toml\" | head -n 1 | tr 'A-F' 'a-f')\n\
fi\n";

/// Without `--approver-set-sha256`: an earlier `approver_set_sha256` that is not a quoted 64-hex
/// string stops the script (exit 1, nothing written) rather than be dropped.
const UNREADABLE_PIN_REFUSED: &str = "if [ -z \"$BCD_KEPT_PIN\" ] && [ -f \"$BCD_ETC/config.toml\" ] && \
grep -q '^[[:space:]]*approver_set_sha256[[:space:]]*=' \"$BCD_ETC/config.toml\"; then\n\
\x20 echo \"$BCD_ETC/config.toml: its approver_set_sha256 is not 64 hex characters in double quotes, so this \
upgrade cannot keep it: fix or remove that line, or pass --approver-set-sha256 HEX to bcctl node install-script \
for a script that replaces it; nothing was written\" >&2\n\
\x20 exit 1\n\
fi\n";

/// `text` written (`>`) or appended (`>>`) to `target` by a here-document.
fn heredoc_to(text: &str, target: &str, op: &str) -> String {
    let marker = heredoc_marker(text);
    let newline = if text.ends_with('\n') { "" } else { "\n" };
    format!("cat {op} {target} <<'{marker}'\n{text}{newline}{marker}\n")
}

/// A heredoc end marker that does not occur in `text`.
fn heredoc_marker(text: &str) -> String {
    let mut marker = String::from("BCD_EOF");
    while text.lines().any(|l| l == marker) {
        marker.push('_');
    }
    marker
}

/// `text` inside double quotes in sh: `\`, `"`, `$` and `` ` `` escaped.
fn sh_dq(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `text` as one sh word: bare when it is plain, else in single quotes.
pub fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=@+,".contains(c))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> NodeSetupError + '_ {
    move |source| NodeSetupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` through a temporary file (created with `mode`) and a rename.
pub fn write_replace(path: &Path, bytes: &[u8], mode: u32) -> Result<(), NodeSetupError> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = options.open(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// The `bcd` to name in a printed command: the absolute path of the `bcd` beside this `bcctl`
/// when there is one, else plain `bcd` (found on PATH).
pub fn bcd_program() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("bcd")))
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "bcd".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_sh() {
        assert_eq!(shell_quote("/usr/bin/bcd"), "/usr/bin/bcd");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(sh_dq("a$b\"c"), "a\\$b\\\"c");
    }

    #[test]
    fn approver_sets_are_64_hex() {
        let ok = "AB".repeat(32);
        assert_eq!(approver_set(&ok).ok(), Some("ab".repeat(32)));
        assert!(approver_set("abc").is_err());
        assert!(approver_set(&"zz".repeat(32)).is_err());
    }

    #[test]
    fn a_site_listen_is_written_under_site() {
        assert!(site_table("192.0.2.10:8069").ends_with("[site]\nlisten = \"192.0.2.10:8069\"\n"));
    }

    #[test]
    fn a_heredoc_marker_is_not_in_the_text() {
        assert_eq!(heredoc_marker("x\n"), "BCD_EOF");
        assert_eq!(heredoc_marker("BCD_EOF\n"), "BCD_EOF_");
    }
}
