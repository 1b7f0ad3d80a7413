//! The install script's approver set pin (spec 003: "daemon install-script --approver-set-sha256
//! HEX writes it into the node's config.toml as approver_set_sha256 (an upgrade run without the
//! flag keeps an existing pin)"; issue 45 item 3; decision 0099), on both backends: the real
//! `bcctl node install-script` writes the script, `sh` and `bash` each run it into a temporary
//! root (`BCD_ETC`), and `config.toml`'s bytes are checked after an install without a pin, one
//! with the flag, an upgrade without it (the earlier pin kept over the store's published set), an
//! upgrade with a new value (replaced), and a fresh install taking the published set. A malformed
//! flag is refused by bcctl, and an earlier pin the script cannot read stops it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use commands::quorum::{settle_trust_bundle, BundleConfig};
use commands::SystemClock;
use domain::quorum::{ApproverKey, ApproverSet, ApproverSetOffer, TrustDomain};
use events::store::testkit::TestDb;

use crate::support::bcctl_bin;

const TD: &str = "pins.example.com";
const SERVER: &str = "cp.example:8443";
const NOTE_GIVEN: &str =
    "# The first approver set this node takes (approverSetSha256 of `bcctl pki trust-version`).";
const NOTE_KEPT: &str =
    "# The first approver set this node takes, kept from the earlier configuration.";
const NO_PIN: &str = "# No quorum yet: once one is published, add its approverSetSha256 (`bcctl pki trust-version --json`).\n\
                      # approver_set_sha256 = \"<64 hex>\"\n";

/// `bcctl node install-script` against the store at `url`, with `--approver-set-sha256 flag`.
fn generate(dir: &Path, url: &str, data: &Path, flag: Option<&str>) -> Output {
    let mut cmd = Command::new(bcctl_bin());
    cmd.current_dir(dir)
        .env("DATABASE_URL", url)
        .env("BC_PKI_BUNDLE", crate::batch_cli::bundle_for(TD))
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .args(["node", "install-script", "--join-address", SERVER])
        .arg("--data-dir")
        .arg(data);
    if let Some(hex) = flag {
        cmd.args(["--approver-set-sha256", hex]);
    }
    cmd.output().expect("bcctl node install-script")
}

/// The node's two roots: the script runs under `sh` in the first and `bash` in the second.
struct Roots {
    dir: PathBuf,
    url: String,
    data: PathBuf,
    etcs: [PathBuf; 2],
}

/// What one run of a script said, and the `config.toml` it left (the same in both roots).
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    config: String,
}

impl Roots {
    fn new(dir: &Path, url: &str, name: &str) -> Roots {
        Roots {
            dir: dir.to_path_buf(),
            url: url.to_string(),
            data: dir.join("var/lib/bcd"),
            etcs: [
                dir.join(format!("{name}-sh/etc/bcd")),
                dir.join(format!("{name}-bash/etc/bcd")),
            ],
        }
    }

    /// Generates the script and runs it in both roots; both must end alike.
    fn install(&self, flag: Option<&str>) -> Ran {
        let out = generate(&self.dir, &self.url, &self.data, flag);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = self.dir.join("install-bcd.sh");
        std::fs::write(&script, &out.stdout).expect("script");
        let mut runs = Vec::new();
        for (shell, etc) in ["sh", "bash"].into_iter().zip(&self.etcs) {
            let out = Command::new(shell)
                .arg(&script)
                .env("BCD_ETC", etc)
                .output()
                .expect("run the script");
            // The root's path as the script names it, so that both runs read alike.
            let said = |b: &[u8]| {
                String::from_utf8_lossy(b).replace(&etc.display().to_string(), "$BCD_ETC")
            };
            runs.push(Ran {
                code: out.status.code(),
                stdout: said(&out.stdout),
                stderr: said(&out.stderr),
                config: std::fs::read_to_string(etc.join("config.toml")).unwrap_or_default(),
            });
        }
        let bash = runs.pop().expect("bash");
        let sh = runs.pop().expect("sh");
        assert_eq!(
            (&sh.code, &sh.stdout, &sh.stderr, &sh.config),
            (&bash.code, &bash.stdout, &bash.stderr, &bash.config),
            "sh and bash differ"
        );
        for etc in &self.etcs {
            assert!(
                !etc.join("config.toml.tmp").exists(),
                "a temporary file left"
            );
        }
        sh
    }
}

/// `base` (written with no pin) with the pin's two lines.
fn with_pin(base: &str, note: &str, hex: &str) -> String {
    assert!(base.contains(NO_PIN), "{base}");
    base.replace(
        NO_PIN,
        &format!("{note}\napprover_set_sha256 = \"{hex}\"\n"),
    )
}

/// Publishes a one-key approver set; its approverSetSha256.
async fn publish(db: &TestDb) -> String {
    use rcgen::PublicKeyData;
    let key = rcgen::KeyPair::generate().expect("P-256 key");
    let set = ApproverSet::new(
        vec![ApproverKey::from_spki(&key.subject_public_key_info()).expect("spki")],
        1,
        vec![],
        0,
    )
    .expect("set");
    let sha = hex::encode(set.digest().as_bytes());
    let store = db.store().await.expect("store");
    settle_trust_bundle(
        &store,
        &SystemClock,
        &BundleConfig {
            trust_domain: TrustDomain::new(TD).expect("td"),
            command_signing_roots: vec![vec![1, 2, 3]],
            active_root: vec![1, 2, 3],
            approvers: ApproverSetOffer {
                set,
                epoch: 1,
                signatures: vec![],
            },
            floor: 0,
            pin: None,
        },
    )
    .await
    .expect("settle");
    sha
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_script_writes_keeps_and_replaces_the_approver_set_pin() {
    for db in TestDb::each().await.expect("stores") {
        let tmp = tempfile::tempdir().expect("tempdir");
        let node = Roots::new(tmp.path(), db.url(), "node");
        let (a, b) = ("ab".repeat(32), "cd".repeat(32));

        // A first install without a quorum: the pin's placeholder, commented.
        let first = node.install(None);
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        let base = first.config;
        assert!(
            base.starts_with(&format!(
                "# Written by `bcctl node install-script`: bcd's configuration for this deployment.\n\
                 # join-encryption.jwk and join-signing.jwk must sit beside this file.\n\
                 server = \"{SERVER}\"\ndata_dir = \"{}\"\nserving_ca_spki_pin = \"sha256/",
                node.data.display()
            )),
            "{base}"
        );
        assert!(base.ends_with(NO_PIN), "{base}");
        assert!(
            !first.stdout.contains("approver set pin"),
            "{}",
            first.stdout
        );

        // The flag writes the pin.
        let pinned = node.install(Some(&a));
        assert_eq!(pinned.code, Some(0), "{}", pinned.stderr);
        assert_eq!(pinned.config, with_pin(&base, NOTE_GIVEN, &a));
        assert!(
            !pinned.stdout.contains("approver set pin"),
            "{}",
            pinned.stdout
        );

        // The store now publishes another set: an upgrade without the flag keeps the pin.
        let published = publish(&db).await;
        let kept = node.install(None);
        assert_eq!(kept.code, Some(0), "{}", kept.stderr);
        assert_eq!(kept.config, with_pin(&base, NOTE_KEPT, &a));
        assert!(
            kept.stdout.starts_with(&format!(
                "kept the approver set pin of the earlier configuration: {a}\n\
                 (the control plane publishes {published}: pass --approver-set-sha256 to bcctl \
                 node install-script to take it)\n"
            )),
            "{}",
            kept.stdout
        );

        // A new value by the flag (upper case is taken as lower case) replaces it.
        let moved = node.install(Some(&b.to_ascii_uppercase()));
        assert_eq!(moved.code, Some(0), "{}", moved.stderr);
        assert_eq!(moved.config, with_pin(&base, NOTE_GIVEN, &b));
        assert!(
            moved.stdout.starts_with(&format!(
                "replaced the approver set pin of the earlier configuration ({a}) with {b}\n"
            )),
            "{}",
            moved.stdout
        );
        // Again without the flag: still b.
        assert_eq!(node.install(None).config, with_pin(&base, NOTE_KEPT, &b));

        // A malformed flag: refused by bcctl, no script.
        let bad = generate(&node.dir, &node.url, &node.data, Some("abc"));
        assert_eq!(bad.status.code(), Some(2));
        assert!(bad.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert!(
            stderr.lines().any(|l| l
                == "bcctl: INVALID_INPUT: --approver-set-sha256 \"abc\": expected 64 hex characters \
                    (approverSetSha256 of `bcctl pki trust-version --json`)"),
            "{stderr}"
        );

        // An earlier pin the script cannot read: an upgrade without the flag stops and writes
        // nothing; one with the flag replaces it.
        let broken = with_pin(&base, NOTE_GIVEN, "abc");
        for etc in &node.etcs {
            std::fs::write(etc.join("config.toml"), &broken).expect("edit");
        }
        let stopped = node.install(None);
        assert_eq!(stopped.code, Some(1));
        assert_eq!(stopped.stdout, "");
        assert_eq!(
            stopped.stderr,
            "$BCD_ETC/config.toml: its approver_set_sha256 is not 64 hex characters in \
                 double quotes, so this upgrade cannot keep it: fix or remove that line, or pass \
                 --approver-set-sha256 HEX to bcctl node install-script for a script that \
             replaces it; nothing was written\n"
        );
        assert_eq!(stopped.config, broken);
        let fixed = node.install(Some(&a));
        assert_eq!(fixed.code, Some(0), "{}", fixed.stderr);
        assert_eq!(fixed.config, with_pin(&base, NOTE_GIVEN, &a));

        // A new node without the flag takes the published set.
        let fresh = Roots::new(tmp.path(), db.url(), "fresh").install(None);
        assert_eq!(fresh.code, Some(0), "{}", fresh.stderr);
        assert_eq!(fresh.config, with_pin(&base, NOTE_GIVEN, &published));
    }
}
