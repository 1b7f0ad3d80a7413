//! Issue 41 item 1 through the real `bcctl`, on both backends: `node names set|add|remove|show`
//! (text and `--json`), the names in `node show`, each change a `node.names.set` event under
//! the local actor, a refusal's message and exit code (a bad name exits 2, a name held by
//! another node 1), and `bcctl rebuild` giving the same names back. Nodes join through the
//! JoinService on the same store ([`crate::token_node_cli::join_with`]).

use std::path::Path;

use events::store::testkit::TestDb;

use crate::support::{bcctl_at, local_actor, ok_json};
use crate::token_node_cli::join_with;

/// Runs a verb that must fail: (exit code, standard error).
fn fails(d: &Path, url: &str, args: &[&str]) -> (i32, String) {
    let out = bcctl_at(d, url, args);
    assert!(!out.status.success(), "bcctl {args:?} succeeded");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_names_through_bcctl() {
    for db in TestDb::each().await.expect("databases") {
        db.store().await.expect("the store, migrated");
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        let init = [
            "pki",
            "init",
            "--trust-domain",
            "names.example.com",
            "--plaintext",
        ];
        assert!(bcctl_at(d, &url, &init).status.success());
        let created = ok_json(
            d,
            &url,
            &[
                "token", "create", "--tenant", "acme", "--site", "s1", "--uses", "2", "--json",
            ],
        );
        let secret = created["secret"].as_str().expect("secret").to_owned();
        let a = join_with(&db, d, &secret, &[]).await;
        let b = join_with(&db, d, &secret, &[]).await;

        let set = ok_json(
            d,
            &url,
            &[
                "node",
                "names",
                "set",
                &a,
                "--dns",
                "web.example.com",
                "--dns",
                "a.example.com",
                "--ip",
                "10.0.0.7",
                "--json",
            ],
        );
        assert_eq!(
            set["dns"],
            serde_json::json!(["a.example.com", "web.example.com"])
        );
        assert_eq!(set["ips"], serde_json::json!(["10.0.0.7"]));
        assert_eq!(set["changed"], true);
        let out = bcctl_at(
            d,
            &url,
            &["node", "names", "remove", &a, "--ip", "10.0.0.7"],
        );
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text,
            format!(
                "node {a} holds 2 name(s) now (remove)\nKIND  NAME\ndns   a.example.com\ndns   \
                 web.example.com\n"
            )
        );
        let again = ok_json(
            d,
            &url,
            &[
                "node",
                "names",
                "add",
                &a,
                "--dns",
                "a.example.com",
                "--json",
            ],
        );
        assert_eq!(again["changed"], false);

        // Refusals: a bad name is a usage error (2), a name held elsewhere a refusal (1).
        let (code, err) = fails(
            d,
            &url,
            &["node", "names", "add", &b, "--dns", "*.example.com"],
        );
        assert_eq!(code, 2);
        assert_eq!(
            err,
            "bcctl: INVALID_INPUT: --dns \"*.example.com\": a wildcard is not allowed: give each \
             name the node serves\n"
        );
        let (code, err) = fails(
            d,
            &url,
            &[
                "node",
                "names",
                "add",
                &b,
                "--dns",
                "web.example.com",
                "--json",
            ],
        );
        assert_eq!(code, 1);
        let err: serde_json::Value = serde_json::from_str(&err).expect("JSON error");
        assert_eq!(
            err["error"]["message"],
            format!(
                "INVALID_STATE: DNS name web.example.com is held by node {a} of tenant acme: \
                 remove it there first (bcctl node names remove {a} --dns web.example.com), or \
                 give --allow-shared to let both nodes hold it"
            )
        );
        assert_eq!(err["error"]["exitCode"], 1);
        let shared = ok_json(
            d,
            &url,
            &[
                "node",
                "names",
                "add",
                &b,
                "--dns",
                "web.example.com",
                "--allow-shared",
                "--json",
            ],
        );
        assert_eq!(shared["dns"], serde_json::json!(["web.example.com"]));

        // node show lists them; each change is one event under the local actor.
        let shown = ok_json(d, &url, &["node", "show", &a, "--json"]);
        assert_eq!(
            shown["names"],
            serde_json::json!({"dns": ["a.example.com", "web.example.com"], "ips": []})
        );
        let listed = ok_json(
            d,
            &url,
            &["events", "list", "--type", "node.names.set", "--json"],
        );
        let listed = listed.as_array().expect("array");
        assert_eq!(listed.len(), 3, "{listed:?}");
        for e in listed {
            assert_eq!(e["actor"]["id"], local_actor().as_str(), "{e}");
        }

        // A rebuild gives the same names back.
        assert!(bcctl_at(d, &url, &["rebuild"]).status.success());
        let after = ok_json(d, &url, &["node", "names", "show", &b, "--json"]);
        assert_eq!(after["dns"], serde_json::json!(["web.example.com"]));
        assert_eq!(after["tenantId"], "acme");
    }
}
