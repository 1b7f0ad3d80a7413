//! Issue 20 "Must show", first bullet, with the real binaries on SQLite and on Postgres: a site
//! agent joins with a site token (`bcd join --role site`) and `bcd site` takes the boot lease; an
//! operator registers a MAC (`bcctl site boot add`); an HTTP GET of `/boot.ipxe` for that MAC
//! returns a script whose kernel line `bcd ramdisk --cmdline` joins with (a ramdisk certificate
//! of at most 2 hours carrying the allowed kinds); the same command line a second time is refused
//! `discovery:assertion-reused`; once agent 1 stopped (releasing the lease) a second site agent
//! takes it at epoch 2, and an assertion agent 1 signed at epoch 1 is refused
//! `discovery:not-lease-holder`.
//!
//! Run: `cargo test -p cli --test suite discovery_e2e::`.

use crate::support::{wait_for, Proc};
use crate::tpm_e2e::last_join_refusal;
use crate::x509pop_e2e::{bcd, node_in, run, start_server_configured, status, Server};

use std::fs;
use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;

const MAC: &str = "52:54:00:12:34:56";
const UUID: &str = "4c4c4544-0042-3510-8052-b2c04f585931";
/// A second machine, whose epoch-1 script is kept for after the lease moved.
const MAC2: &str = "52:54:00:12:34:57";
const UUID2: &str = "4c4c4544-0042-3510-8052-b2c04f585932";
const SITE: &str = "site-1";

/// The serve configuration: a short boot lease, so the test waits seconds, not a minute.
fn serve_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("serve.toml");
    fs::write(
        &path,
        "[sites]\nboot_lease_ttl = \"3s\"\n\n[attestors.discovery]\napproval = \"never\"\n",
    )
    .expect("serve config");
    path
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").to_string()
}

/// `GET path` from the boot server at `addr`: (status, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to bcd site");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: boot\r\n\r\n").as_bytes())
        .expect("send the request");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read the answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, body.to_owned())
}

/// The kernel line of an iPXE script, without `kernel <url> `: what the ramdisk's
/// `/proc/cmdline` holds.
fn kernel_line(script: &str) -> String {
    let line = script
        .lines()
        .find(|l| l.starts_with("kernel "))
        .unwrap_or_else(|| panic!("no kernel line in {script}"));
    let mut words = line.splitn(3, ' ');
    words.next();
    words.next();
    format!("{}\n", words.next().unwrap_or_default())
}

/// A sysfs with a registered machine's NIC and product UUID.
fn sysfs(root: &Path, mac: &str, uuid: &str) {
    let nic = root.join("class/net/eth0");
    fs::create_dir_all(nic.join("device")).expect("mkdir");
    fs::write(nic.join("type"), "1\n").expect("write");
    fs::write(nic.join("addr_assign_type"), "0\n").expect("write");
    fs::write(nic.join("address"), format!("{mac}\n")).expect("write");
    let dmi = root.join("class/dmi/id");
    fs::create_dir_all(&dmi).expect("mkdir");
    fs::write(dmi.join("product_uuid"), format!("{uuid}\n")).expect("write");
}

/// A site agent: joined with a fresh site token into `data`, then `bcd site` on `listen`.
fn site_agent(server: &Server, tmp: &Path, name: &str, listen: &str) -> Proc {
    let data = tmp.join(name);
    let token = server.token(&["--role", "site"]);
    let mut join = bcd(server, &data, &["join", "--role", "site"]);
    join.env("BCD_JOIN_TOKEN", &token);
    let (code, stdout, stderr) = run(join);
    assert_eq!(code, 0, "bcd join --role site: {stdout}{stderr}");
    assert!(stdout.contains("role site"), "{stdout}");
    Proc::spawn(
        name,
        bcd(server, &data, &["site", "--listen", listen]),
        tmp.join(format!("{name}.log")),
    )
}

/// `bcd ramdisk --cmdline <file>` in a fresh data directory on the first machine: (code,
/// stdout, stderr).
fn ramdisk(server: &Server, tmp: &Path, name: &str, cmdline: &Path) -> (i32, String, String) {
    ramdisk_on(server, tmp, name, cmdline, (MAC, UUID))
}

/// `bcd ramdisk --cmdline <file>` on the machine `(mac, uuid)`.
fn ramdisk_on(
    server: &Server,
    tmp: &Path,
    name: &str,
    cmdline: &Path,
    (mac, uuid): (&str, &str),
) -> (i32, String, String) {
    let sys = tmp.join(format!("sys-{}", mac.replace(':', "")));
    if !sys.exists() {
        sysfs(&sys, mac, uuid);
    }
    let data = tmp.join(name);
    let mut cmd = bcd(
        server,
        &data,
        &["ramdisk", "--cmdline", &cmdline.display().to_string()],
    );
    cmd.env("BCD_SYSFS_ROOT", &sys);
    run(cmd)
}

fn sigterm(agent: &Proc) {
    let status = Command::new("kill")
        .args(["-TERM", &agent.child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
}

fn scenario(db_url: &str) {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = serve_config(tmp.path());
    let server = start_server_configured(tmp.path(), db_url, "1h", 3, Some(&config));
    server.bcctl(&[
        "site",
        "create",
        "--id",
        SITE,
        "--tenant",
        "default",
        "--default-pool",
        "default",
    ]);

    // Agent 1 joins with a site token and takes the lease.
    let listen1 = free_port();
    let mut agent1 = site_agent(&server, tmp.path(), "site-agent-1", &listen1);
    agent1.wait_line("boot lease held at epoch 1", Duration::from_secs(60));
    let (code, health) = get(&listen1, "/healthz");
    assert_eq!(code, 200, "{health}");
    let health: serde_json::Value = serde_json::from_str(&health).expect("healthz JSON");
    assert_eq!(
        (health["held"].clone(), health["epoch"].clone()),
        (true.into(), 1.into())
    );

    // The operator registers the machines.
    for (mac, uuid) in [(MAC, UUID), (MAC2, UUID2)] {
        server.bcctl(&[
            "site",
            "boot",
            "add",
            "--site",
            SITE,
            "--mac",
            mac,
            "--product-uuid",
            uuid,
            "--kernel",
            "http://boot.example/vmlinuz",
            "--initrd",
            "http://boot.example/initrd.img",
        ]);
    }

    // iPXE asks for the machine's script; its kernel line is the ramdisk's command line.
    let (code, script) = get(
        &listen1,
        &format!("/boot.ipxe?mac={MAC}&uuid={UUID}&ip=10.0.0.7"),
    );
    assert_eq!(code, 200, "{script}\n{}", agent1.log_text());
    assert!(
        script.starts_with("#!ipxe\nkernel http://boot.example/vmlinuz "),
        "{script}"
    );
    assert!(
        script.ends_with("\ninitrd http://boot.example/initrd.img\nboot\n"),
        "{script}"
    );
    let cmdline = tmp.path().join("cmdline-1");
    fs::write(&cmdline, kernel_line(&script)).expect("write the command line");
    // The same machine asking again gets the same token (one live token per MAC and epoch)
    // under a fresh assertion.
    let (code, again) = get(&listen1, &format!("/boot.ipxe?mac={MAC}"));
    let token = |s: &str| {
        let line = kernel_line(s);
        line.split(' ')
            .find(|w| w.starts_with("bc.token="))
            .map(str::to_owned)
    };
    assert_eq!((code, token(&again)), (200, token(&script)));
    assert!(token(&script).is_some(), "{script}");
    // The second machine's script at epoch 1, kept for after the lease moved.
    let (code, old_script) = get(&listen1, &format!("/boot.ipxe?mac={MAC2}"));
    assert_eq!(code, 200, "{old_script}");
    let old_cmdline = tmp.path().join("cmdline-old");
    fs::write(&old_cmdline, kernel_line(&old_script)).expect("write the command line");
    // An unregistered MAC.
    assert_eq!(get(&listen1, "/boot.ipxe?mac=02:00:00:00:00:01").0, 404);

    // The ramdisk joins with it: a ramdisk certificate of at most 2 hours, the allowed kinds.
    let (code, stdout, stderr) = ramdisk(&server, tmp.path(), "ramdisk-1", &cmdline);
    assert_eq!(
        code,
        0,
        "bcd ramdisk: {stdout}{stderr}\n{}",
        server.proc.log_text()
    );
    assert!(stdout.contains("role ramdisk"), "{stdout}");
    let node = node_in(&stdout, "joined");
    let shown = status(&server, &tmp.path().join("ramdisk-1"));
    assert_eq!(shown["role"], "ramdisk");
    assert_eq!(shown["state"], "ok");
    let left = shown["expiresInSeconds"]
        .as_i64()
        .expect("expiresInSeconds");
    assert!(left > 0 && left <= 2 * 3600, "{shown}");
    let detail = server.bcctl_json(&["node", "show", &node, "--json"]);
    let kinds = detail["certificates"][0]["allowedKinds"].clone();
    assert_eq!(
        kinds,
        serde_json::json!([
            "inventory.refresh",
            "logs.collect",
            "diag.*",
            "disk.wipe",
            "deploy.*",
            "boot.kexec"
        ]),
        "{detail}"
    );
    // bcd holds the same list, from the signed JoinResponse, and enforces it (issue 40 item 16).
    let identity: serde_json::Value = serde_json::from_slice(
        &fs::read(tmp.path().join("ramdisk-1").join("identity.json")).expect("identity.json"),
    )
    .expect("identity.json is JSON");
    assert_eq!(identity["allowedKinds"], kinds, "{identity}");

    // The same command line again: refused, the assertion already used.
    let (code, _, stderr) = ramdisk(&server, tmp.path(), "ramdisk-again", &cmdline);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("Join refused (ACCESS_DENIED)"), "{stderr}");
    assert_eq!(last_join_refusal(&server), "discovery:assertion-reused");

    // Agent 1 stops (releasing the lease); agent 2 takes it at epoch 2.
    sigterm(&agent1);
    let exit = agent1.wait_exit(Duration::from_secs(20));
    assert!(exit.success(), "{exit:?}\n{}", agent1.log_text());
    assert!(agent1.log_text().contains("boot lease released (epoch 1)"));
    let listen2 = free_port();
    let mut agent2 = site_agent(&server, tmp.path(), "site-agent-2", &listen2);
    agent2.wait_line("boot lease held at epoch 2", Duration::from_secs(60));
    wait_for(
        "agent 2's healthz at epoch 2",
        Duration::from_secs(10),
        || get(&listen2, "/healthz").1.contains("\"epoch\":2"),
        || agent2.log_text(),
    );

    // The assertion agent 1 signed at epoch 1 no longer admits.
    let (code, _, stderr) = ramdisk_on(
        &server,
        tmp.path(),
        "ramdisk-old",
        &old_cmdline,
        (MAC2, UUID2),
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("Join refused (ACCESS_DENIED)"), "{stderr}");
    assert_eq!(last_join_refusal(&server), "discovery:not-lease-holder");
    eprintln!("discovery e2e on {db_url}: {:?}", started.elapsed());
}

#[test]
fn discovery_e2e_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn discovery_e2e_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
