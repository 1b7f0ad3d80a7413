//! The Debian packages (issue 44 item 3): `packaging/deb/build.sh` packs the binaries this
//! suite runs (debug ones, uncompressed, so it takes seconds), `dpkg -i` installs both on this
//! machine, `/usr/bin/bcctl up` serves and `/usr/bin/bcd join` joins with the step it printed;
//! no unit is enabled or started by the install; an upgrade over itself keeps the operator's
//! configuration; removal takes the binaries and units and leaves only `/etc` (configuration)
//! and `/var/lib` (data); purge removes what is empty. Needs root and dpkg (CI runs as root):
//! elsewhere it says so and passes without running.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{bcctl_bin, bcd_bin, Proc};

const PACKAGES: [&str; 2] = ["bc-control-plane", "bcd"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

/// Runs `program args`: its output, which must be a success.
fn ok(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?}: {text}");
    text
}

/// The installed version of `package`, if installed.
fn installed(package: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Status} ${Version}", package])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.strip_prefix("install ok installed ")
        .map(str::to_owned)
}

fn root_with_dpkg() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    root && Command::new("dpkg-deb").arg("--version").output().is_ok()
}

/// Both packages at `version`, built from the suite's binaries into `out`.
fn build(bins: &Path, version: &str, out: &Path) -> Vec<String> {
    let script = repo().join("packaging/deb/build.sh");
    let (b, o) = (bins.display().to_string(), out.display().to_string());
    let printed = ok(
        &script.display().to_string(),
        &[
            "--bins",
            &b,
            "--version",
            version,
            "--out",
            &o,
            "--compress",
            "none",
        ],
    );
    printed.lines().map(str::to_owned).collect()
}

#[test]
fn the_packages_install_serve_join_upgrade_and_remove() {
    if !root_with_dpkg() {
        eprintln!("deb_packages: needs root and dpkg-deb (CI has both): not run");
        return;
    }
    for p in PACKAGES {
        // A run killed half way left them: start from none.
        if installed(p).is_some() {
            ok("dpkg", &["--purge", p]);
        }
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let bins = tmp.path().join("bins");
    std::fs::create_dir_all(&bins).expect("bins");
    std::fs::copy(bcctl_bin(), bins.join("bcctl")).expect("bcctl");
    std::fs::copy(bcd_bin(), bins.join("bcd")).expect("bcd");
    let first = build(&bins, "0.1.0", &tmp.path().join("v1"));
    let second = build(&bins, "0.1.1", &tmp.path().join("v2"));
    assert_eq!(first.len(), 2, "{first:?}");

    // Unsafe I/O: this install need not survive a power cut, and fsync per file is most of it.
    let mut args = vec!["--force-unsafe-io", "-i"];
    args.extend(first.iter().map(String::as_str));
    ok("dpkg", &args);
    for p in PACKAGES {
        assert_eq!(installed(p).as_deref(), Some("0.1.0"), "{p}");
    }
    for user in ["bcctl", "bcd"] {
        ok("getent", &["passwd", user]);
    }
    let owner = ok("stat", &["-c", "%U %a", "/var/lib/bcd"]);
    assert_eq!(owner.trim(), "bcd 700");
    let unit = std::fs::read_to_string("/lib/systemd/system/bcd.service").expect("bcd.service");
    assert!(
        unit.contains("ExecStart=/usr/bin/bcd node --config /etc/bcd/config.toml"),
        "{unit}"
    );
    // Installed, not enabled: no unit of ours is wanted by any target.
    let wants = Command::new("sh")
        .args(["-c", "ls /etc/systemd/system/*.wants/ 2>/dev/null"])
        .output()
        .expect("ls");
    let wanted = String::from_utf8_lossy(&wants.stdout).into_owned();
    assert!(
        !wanted.contains("bcd") && !wanted.contains("bcctl"),
        "{wanted}"
    );

    // The installed binaries: bcctl up serves, and bcd joins with the step it printed.
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).expect("work");
    let mut up = Command::new("/usr/bin/bcctl");
    up.args(["up", "--port", "0"]).current_dir(&work);
    let mut server = Proc::spawn("/usr/bin/bcctl up", up, work.join("up.log"));
    server.wait_line("serving until Ctrl-C", Duration::from_secs(60));
    let printed = server.log_text();
    let step = printed
        .lines()
        .skip_while(|l| !l.starts_with("join a machine with:"))
        .nth(1)
        .unwrap_or_else(|| panic!("no join step:\n{printed}"))
        .trim()
        .to_owned();
    assert!(step.starts_with("/usr/bin/bcd join "), "{step}");
    let joined = ok("sh", &["-c", &format!("cd {} && {step}", work.display())]);
    assert!(joined.contains("joined as node_"), "{joined}");
    drop(server);

    // An upgrade over itself keeps the operator's configuration.
    let config = "# the operator's\nserver = \"gateway.example.com:8443\"\n";
    std::fs::write("/etc/bcd/config.toml", config).expect("config");
    let mut args = vec!["--force-unsafe-io", "-i"];
    args.extend(second.iter().map(String::as_str));
    ok("dpkg", &args);
    for p in PACKAGES {
        assert_eq!(installed(p).as_deref(), Some("0.1.1"), "{p}");
    }
    assert_eq!(
        std::fs::read_to_string("/etc/bcd/config.toml")
            .ok()
            .as_deref(),
        Some(config)
    );

    // Removal: the binaries and units go; configuration and data stay.
    ok("dpkg", &["-r", PACKAGES[0], PACKAGES[1]]);
    for gone in [
        "/usr/bin/bcctl",
        "/usr/bin/bcd",
        "/lib/systemd/system/bcd.service",
        "/lib/systemd/system/bcctl-serve.service",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} left after removal");
    }
    assert!(Path::new("/etc/bcd/config.toml").exists());
    assert!(Path::new("/var/lib/bcd").is_dir());
    // Purge: what is empty goes; the operator's file is theirs to delete.
    ok("dpkg", &["--purge", PACKAGES[0], PACKAGES[1]]);
    assert!(!Path::new("/etc/bcctl").exists() && !Path::new("/var/lib/bcctl").exists());
    assert!(Path::new("/etc/bcd/config.toml").exists());
    std::fs::remove_file("/etc/bcd/config.toml").expect("cleanup");
    let _ = std::fs::remove_dir("/etc/bcd");
    let _ = std::fs::remove_dir("/var/lib/bcd");
    for p in PACKAGES {
        assert_eq!(installed(p), None, "{p}");
    }
}
