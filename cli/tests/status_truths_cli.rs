//! Issue 44 item 5 through the real `bcctl`, on both backends: `token list` says `active`,
//! `used up`, `expired` or `revoked` (text and `--json`); `node revoke` prints the node's status
//! after the revocation (`revoked`, not the row's `active`); `tenant list` and `tenant show`
//! count nodes by that status (a revoked node is not active). Nodes join through the
//! JoinService on the same store ([`crate::token_node_cli::join_with`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;

use crate::support::{bcctl_at, ok_json};
use crate::token_node_cli::join_with;

/// `token create --tenant acme` with `uses` and `expires`: (id, secret), its status checked.
fn create(d: &Path, url: &str, uses: &str, expires: &str) -> (String, String) {
    let created = ok_json(
        d,
        url,
        &[
            "token",
            "create",
            "--tenant",
            "acme",
            "--site",
            "s1",
            "--uses",
            uses,
            "--expires-in",
            expires,
            "--json",
        ],
    );
    assert_eq!(created["token"]["status"], "active", "{created}");
    (
        created["token"]["tokenId"].as_str().expect("id").to_owned(),
        created["secret"].as_str().expect("secret").to_owned(),
    )
}

fn stdout(d: &Path, url: &str, args: &[&str]) -> String {
    let out = bcctl_at(d, url, args);
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text table's line that starts with `first`.
fn line<'a>(text: &'a str, first: &str) -> &'a str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .unwrap_or_else(|| panic!("no line for {first} in\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_node_and_tenant_status_tell_the_truth() {
    for db in TestDb::each().await.expect("databases") {
        db.store().await.expect("the store, migrated");
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        stdout(
            d,
            &url,
            &[
                "pki",
                "init",
                "--trust-domain",
                "status.example.com",
                "--plaintext",
            ],
        );
        let (short, _) = create(d, &url, "2", "1s");
        let short_made = Instant::now();
        let (once, once_secret) = create(d, &url, "1", "1h");
        let (spare, spare_secret) = create(d, &url, "4", "1h");
        let (revoked, _) = create(d, &url, "2", "1h");
        let used = join_with(&db, d, &once_secret, &[]).await;
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(join_with(&db, d, &spare_secret, &[]).await);
        }
        let done = ok_json(d, &url, &["token", "revoke", &revoked, "--json"]);
        assert_eq!(done["status"], "revoked");
        std::thread::sleep(Duration::from_millis(1200).saturating_sub(short_made.elapsed()));

        // token list: each status, in --json and in the STATUS column.
        let listed = ok_json(d, &url, &["token", "list", "--json"]);
        let by_id: BTreeMap<String, String> = listed
            .as_array()
            .expect("array")
            .iter()
            .map(|t| {
                (
                    t["tokenId"].as_str().expect("id").to_owned(),
                    t["status"].as_str().unwrap_or("(none)").to_owned(),
                )
            })
            .collect();
        let want: BTreeMap<String, String> = [
            (&short, "expired"),
            (&once, "used up"),
            (&spare, "active"),
            (&revoked, "revoked"),
        ]
        .iter()
        .map(|(id, s)| (id.to_string(), s.to_string()))
        .collect();
        assert_eq!(by_id, want);
        let text = stdout(d, &url, &["token", "list"]);
        assert!(
            text.lines().next().unwrap_or("").ends_with("  STATUS"),
            "{text}"
        );
        assert!(line(&text, &short).ends_with("  expired"), "{text}");
        assert!(line(&text, &once).ends_with("  used up"), "{text}");
        assert!(line(&text, &spare).ends_with("  active"), "{text}");
        let revoked_line = line(&text, &revoked);
        assert!(
            revoked_line.contains("  revoked 20")
                && revoked_line.ends_with(" (revoked by operator)"),
            "{text}"
        );

        // node revoke prints the node as it is after the revocation.
        let out = ok_json(d, &url, &["node", "revoke", &nodes[0], "--json"]);
        assert_eq!(out["status"], "revoked", "{out}");
        assert_eq!(out["identityGeneration"], 2);
        let again = ok_json(d, &url, &["node", "revoke", &nodes[0], "--json"]);
        assert_eq!(again["alreadyRevoked"], true);
        assert_eq!(again["node"]["status"], "revoked", "{again}");
        let text = stdout(d, &url, &["node", "revoke", &nodes[1]]);
        assert!(
            text.starts_with(&format!("revoked the identity of node {}\n", nodes[1])),
            "{text}"
        );
        let row: Vec<&str> = line(&text, &nodes[1]).split_whitespace().collect();
        // NODE TENANT SITE POOL ROLE STATUS GEN ...
        assert_eq!((row[5], row[6]), ("revoked", "2"), "{text}");
        let shown = ok_json(d, &url, &["node", "show", &nodes[1], "--json"]);
        assert_eq!(shown["status"], "revoked");
        let retired = ok_json(d, &url, &["node", "retire", &used, "--json"]);
        assert_eq!(retired["status"], "retired");

        // tenant list and show count by status: 4 nodes, 1 active, 2 revoked, 1 retired.
        let tenants = ok_json(d, &url, &["tenant", "list", "--json"]);
        let acme = tenants
            .as_array()
            .and_then(|a| a.iter().find(|t| t["tenantId"] == "acme"))
            .expect("acme")
            .clone();
        assert_eq!(acme["nodes"], 4, "{acme}");
        assert_eq!(acme["activeNodes"], 1, "{acme}");
        assert_eq!(
            acme["nodesByStatus"],
            serde_json::json!({"active": 1, "retired": 1, "revoked": 2})
        );
        let text = stdout(d, &url, &["tenant", "list"]);
        assert!(
            text.lines()
                .next()
                .unwrap_or("")
                .ends_with("NODES  ACTIVE  REVOKED  EXPIRED  RETIRED  DELETED"),
            "{text}"
        );
        let row: Vec<&str> = line(&text, "acme").split_whitespace().collect();
        assert_eq!(row[4..], ["4", "1", "2", "0", "1", "0"], "{text}");
        let text = stdout(d, &url, &["tenant", "show", "acme"]);
        assert!(
            text.contains("\nnodes         4 (1 active, 2 revoked, 1 retired)\n"),
            "{text}"
        );
        // The spare token has a use left; the others are spent, expired or revoked.
        assert!(text.contains("\nlive tokens   1\n"), "{text}");
    }
}
