//! Issue 41 item 1, the names a node may serve, on both backends: `set`, `add`, `remove` and
//! the read, one `node.names.set` per change carrying the whole resulting set, each refusal
//! reason with its exact message, names freed by a retirement, the projection rebuilt equal;
//! on Postgres, two concurrent `add`s of one name to two nodes of a tenant: exactly one wins.

use crate::identity_support::*;

use commands::identity::{IdentityError, NodeNamesView};
use domain::identity::{ChangeNames, NamesChange, NamesRefusal, MAX_NODE_NAMES};
use events::schema::NodeNamesSet;
use events::store::testkit::TestDb;

fn change(node: &str, change: NamesChange, dns: &[&str], ips: &[&str]) -> ChangeNames {
    ChangeNames {
        node_id: node.into(),
        change,
        dns: dns.iter().map(|s| s.to_string()).collect(),
        ips: ips.iter().map(|s| s.to_string()).collect(),
        allow_shared: false,
    }
}

async fn run(f: &Fixture, cmd: &ChangeNames) -> Result<NodeNamesView, IdentityError> {
    f.svc.admin().change_names(cmd).await
}

/// The refusal a change got, or a panic naming what it got instead.
async fn refused(f: &Fixture, cmd: &ChangeNames) -> NamesRefusal {
    match run(f, cmd).await {
        Err(IdentityError::Names(r)) => r,
        other => panic!("expected a names refusal, got {other:?}"),
    }
}

/// Every `node.names.set` of the log, decoded, in order.
async fn names_events(f: &Fixture) -> Vec<NodeNamesSet> {
    all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| e.event_type == "node.names.set")
        .map(|e| e.decode::<NodeNamesSet>().unwrap())
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn set_add_remove_and_show_record_the_whole_set() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_, a) = join_new(&f, "acme").await;
        let node = a.node_id.as_str();
        let set = change(
            node,
            NamesChange::Set,
            &["web.example.com", "a.example.com", "web.example.com"],
            &["10.0.0.7", "2001:0db8:0:0::1"],
        );
        let view = run(&f, &set).await.unwrap();
        assert_eq!(view.dns, strings(&["a.example.com", "web.example.com"]));
        assert_eq!(view.ips, strings(&["10.0.0.7", "2001:db8::1"]));
        assert_eq!(view.tenant_id, "acme");
        assert!(view.changed);
        // The same set again, and an add of what it holds: nothing appended.
        assert!(!run(&f, &set).await.unwrap().changed);
        let again = change(node, NamesChange::Add, &["a.example.com"], &[]);
        assert!(!run(&f, &again).await.unwrap().changed);
        let add = change(node, NamesChange::Add, &["b.example.com"], &["fe80::1"]);
        let view = run(&f, &add).await.unwrap();
        assert_eq!(
            view.dns,
            strings(&["a.example.com", "b.example.com", "web.example.com"])
        );
        assert_eq!(view.ips, strings(&["10.0.0.7", "2001:db8::1", "fe80::1"]));
        let remove = change(
            node,
            NamesChange::Remove,
            &["web.example.com"],
            &["10.0.0.7"],
        );
        let view = run(&f, &remove).await.unwrap();
        assert_eq!(view.dns, strings(&["a.example.com", "b.example.com"]));
        assert_eq!(view.ips, strings(&["2001:db8::1", "fe80::1"]));
        let shown = f.svc.admin().names_of(node).await.unwrap();
        assert_eq!((shown.dns, shown.ips), (view.dns.clone(), view.ips.clone()));
        // Set with none clears them.
        let view = run(&f, &change(node, NamesChange::Set, &[], &[]))
            .await
            .unwrap();
        assert!(view.dns.is_empty() && view.ips.is_empty() && view.changed);

        let events = names_events(&f).await;
        let got: Vec<(String, Vec<String>, Vec<String>)> = events
            .iter()
            .map(|e| {
                (
                    e.change.clone(),
                    e.dns_names.clone(),
                    e.ip_addresses.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "set".into(),
                    strings(&["a.example.com", "web.example.com"]),
                    strings(&["10.0.0.7", "2001:db8::1"])
                ),
                (
                    "add".into(),
                    strings(&["a.example.com", "b.example.com", "web.example.com"]),
                    strings(&["10.0.0.7", "2001:db8::1", "fe80::1"])
                ),
                (
                    "remove".into(),
                    strings(&["a.example.com", "b.example.com"]),
                    strings(&["2001:db8::1", "fe80::1"])
                ),
                ("set".into(), vec![], vec![]),
            ]
        );
        assert!(events.iter().all(|e| e.node_id == node && !e.allow_shared));
        // The node's stream version follows the events: a revoke still applies afterwards.
        f.svc.revoke_identity(node, "done").await.unwrap();
    }
}

#[tokio::test]
async fn a_name_that_is_not_plain_is_refused() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_, a) = join_new(&f, "acme").await;
        let node = a.node_id.as_str();
        let long_label = "a".repeat(64);
        let long_name = format!("{}.example.com", vec!["b".repeat(60); 4].join("."));
        let cases: Vec<(String, String)> = vec![
            (
                "*.example.com".into(),
                "a wildcard is not allowed: give each name the node serves".into(),
            ),
            (
                "web.example.com.".into(),
                "no trailing dot: write web.example.com".into(),
            ),
            (
                "Web.Example.com".into(),
                "upper-case letters: write web.example.com".into(),
            ),
            (
                "web_1.example.com".into(),
                "'_' is not allowed: only a-z, 0-9, '-' and '.'".into(),
            ),
            ("".into(), "empty".into()),
            (
                "a..example.com".into(),
                "an empty label (a leading dot or two dots in a row)".into(),
            ),
            (
                format!("{long_label}.example.com"),
                format!("label {long_label} is 64 characters; at most 63"),
            ),
            (
                "-web.example.com".into(),
                "label -web starts or ends with '-'".into(),
            ),
            (
                long_name.clone(),
                format!("{} characters; at most 253", long_name.len()),
            ),
            ("10.0.0.1".into(), "an IP address: give it with --ip".into()),
        ];
        for (name, why) in cases {
            let r = refused(&f, &change(node, NamesChange::Set, &[&name], &[])).await;
            assert_eq!(
                r.to_string(),
                format!("INVALID_INPUT: --dns {name:?}: {why}")
            );
            assert_eq!(r.reason(), "bad-dns-name");
            assert!(r.is_input());
        }
        let ips = [
            (
                "10.0.0",
                "not an IPv4 or IPv6 address (no port, no brackets, no zone)",
            ),
            (
                "[::1]",
                "not an IPv4 or IPv6 address (no port, no brackets, no zone)",
            ),
            (
                "0.0.0.0",
                "0.0.0.0 is the unspecified address, not one a node serves on",
            ),
            (
                "::",
                ":: is the unspecified address, not one a node serves on",
            ),
            ("224.0.0.1", "224.0.0.1 is a multicast address"),
            ("ff02::1", "ff02::1 is a multicast address"),
            (
                "255.255.255.255",
                "255.255.255.255 is the broadcast address",
            ),
        ];
        for (ip, why) in ips {
            let r = refused(&f, &change(node, NamesChange::Add, &[], &[ip])).await;
            assert_eq!(r.to_string(), format!("INVALID_INPUT: --ip {ip:?}: {why}"));
            assert_eq!(r.reason(), "bad-ip-address");
        }
        assert!(names_events(&f).await.is_empty());
    }
}

#[tokio::test]
async fn add_or_remove_without_a_name_is_refused() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_, a) = join_new(&f, "acme").await;
        for (c, word) in [(NamesChange::Add, "add"), (NamesChange::Remove, "remove")] {
            let r = refused(&f, &change(&a.node_id, c, &[], &[])).await;
            assert_eq!(
                r.to_string(),
                format!(
                    "INVALID_INPUT: node names {word} needs at least one --dns NAME or --ip ADDR \
                     (node names set with none clears the node's names)"
                )
            );
            assert_eq!(r.reason(), "nothing-given");
        }
    }
}

#[tokio::test]
async fn an_unknown_node_is_refused() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let r = refused(
            &f,
            &change("nd_missing", NamesChange::Add, &["a.example.com"], &[]),
        )
        .await;
        assert_eq!(r.to_string(), "NOT_FOUND: no node nd_missing");
        assert_eq!(r.reason(), "unknown-node");
        let read = f.svc.admin().names_of("nd_missing").await.unwrap_err();
        assert_eq!(read.to_string(), "NOT_FOUND: no node nd_missing");
    }
}

#[tokio::test]
async fn a_revoked_retired_or_deleted_node_is_refused() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_, revoked) = join_new(&f, "acme").await;
        let (_, retired) = join_new(&f, "acme").await;
        let (_, deleted) = join_new(&f, "acme").await;
        f.svc
            .revoke_identity(&revoked.node_id, "lost")
            .await
            .unwrap();
        f.svc.retire_node(&retired.node_id, "old").await.unwrap();
        f.svc.delete_node(&deleted.node_id, "gone").await.unwrap();
        for (node, status) in [
            (&revoked.node_id, "revoked"),
            (&retired.node_id, "retired"),
            (&deleted.node_id, "deleted"),
        ] {
            let r = refused(&f, &change(node, NamesChange::Set, &["a.example.com"], &[])).await;
            let hint = if status == "revoked" {
                format!(
                    "its names cannot change until a --reclaim token re-keys it (bcctl token \
                     create --reclaim {node}), or retire it to free them"
                )
            } else {
                "it serves nothing any more, and holds no names".to_owned()
            };
            assert_eq!(
                r.to_string(),
                format!("INVALID_STATE: node {node} is {status}: {hint}")
            );
            assert_eq!(r.reason(), "node-state");
            assert!(!r.is_input());
        }
        assert!(names_events(&f).await.is_empty());
    }
}

#[tokio::test]
async fn removing_a_name_the_node_does_not_hold_is_refused() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_, a) = join_new(&f, "acme").await;
        let node = a.node_id.as_str();
        run(&f, &change(node, NamesChange::Set, &["a.example.com"], &[]))
            .await
            .unwrap();
        let r = refused(
            &f,
            &change(node, NamesChange::Remove, &["a.example.com"], &["10.1.1.1"]),
        )
        .await;
        assert_eq!(
            r.to_string(),
            format!(
                "INVALID_STATE: node {node} does not hold IP address 10.1.1.1; bcctl node names \
                 show {node} lists what it holds"
            )
        );
        assert_eq!(r.reason(), "not-held");
        // Nothing removed: the refusal is of the whole change.
        let shown = f.svc.admin().names_of(node).await.unwrap();
        assert_eq!(shown.dns, strings(&["a.example.com"]));
    }
}

#[tokio::test]
async fn more_than_the_bound_of_names_is_refused() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_, a) = join_new(&f, "acme").await;
        let node = a.node_id.as_str();
        let names: Vec<String> = (0..MAX_NODE_NAMES)
            .map(|i| format!("n{i}.example.com"))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        run(&f, &change(node, NamesChange::Set, &refs, &[]))
            .await
            .unwrap();
        let r = refused(&f, &change(node, NamesChange::Add, &[], &["10.0.0.1"])).await;
        assert_eq!(
            r.to_string(),
            format!(
                "INVALID_STATE: node {node} would hold 33 names; at most 32: remove some first \
                 (bcctl node names remove {node} ...)"
            )
        );
        assert_eq!(r.reason(), "too-many");
    }
}

#[tokio::test]
async fn a_name_another_node_of_the_tenant_holds_is_refused_unless_shared() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_, a) = join_new(&f, "acme").await;
        let (_, b) = join_new(&f, "acme").await;
        let (_, other) = join_new(&f, "globex").await;
        let (na, nb) = (a.node_id.as_str(), b.node_id.as_str());
        run(
            &f,
            &change(na, NamesChange::Set, &["web.example.com"], &["10.0.0.1"]),
        )
        .await
        .unwrap();
        let r = refused(&f, &change(nb, NamesChange::Add, &["web.example.com"], &[])).await;
        assert_eq!(
            r.to_string(),
            format!(
                "INVALID_STATE: DNS name web.example.com is held by node {na} of tenant acme: \
                 remove it there first (bcctl node names remove {na} --dns web.example.com), or \
                 give --allow-shared to let both nodes hold it"
            )
        );
        assert_eq!(r.reason(), "held-elsewhere");
        let r = refused(&f, &change(nb, NamesChange::Set, &[], &["10.0.0.1"])).await;
        assert!(r.to_string().starts_with(&format!(
            "INVALID_STATE: IP address 10.0.0.1 is held by node {na} of tenant acme"
        )));
        // Another tenant's node may hold it.
        run(
            &f,
            &change(&other.node_id, NamesChange::Set, &["web.example.com"], &[]),
        )
        .await
        .unwrap();
        // With --allow-shared both hold it; a later add to B without it keeps the shared name.
        let shared = ChangeNames {
            allow_shared: true,
            ..change(nb, NamesChange::Add, &["web.example.com"], &[])
        };
        assert!(run(&f, &shared).await.unwrap().changed);
        let view = run(&f, &change(nb, NamesChange::Add, &["b.example.com"], &[]))
            .await
            .unwrap();
        assert_eq!(view.dns, strings(&["b.example.com", "web.example.com"]));
        assert!(names_events(&f).await.iter().any(|e| e.allow_shared));
        // A retired node's names are free again.
        f.svc.retire_node(na, "old").await.unwrap();
        assert!(f.svc.admin().names_of(na).await.unwrap().ips.is_empty());
        run(&f, &change(nb, NamesChange::Add, &[], &["10.0.0.1"]))
            .await
            .unwrap();

        // The projection rebuilt from the log is the one written inline, at every batch size.
        let tables = projections::identity::tables();
        let inline = projections::digest_tables(&f.store, &tables).await.unwrap();
        for batch in [1, 3, 500] {
            projections::rebuild(&f.store, &projections::identity::all(), None, batch, |_| {})
                .await
                .unwrap();
            let rebuilt = projections::digest_tables(&f.store, &tables).await.unwrap();
            assert_eq!(inline, rebuilt, "batch {batch}");
        }
        let view = f.svc.admin().names_of(nb).await.unwrap();
        assert_eq!(view.ips, strings(&["10.0.0.1"]));
    }
}

/// Two concurrent `add`s of one name to two nodes of one tenant: exactly one wins, the other is
/// refused as held by the winner, and the log holds one event with the name.
#[tokio::test]
async fn concurrent_adds_of_one_name_one_wins_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    let f = fixture(db).await;
    for round in 0..5 {
        let (_, a) = join_new(&f, "acme").await;
        let (_, b) = join_new(&f, "acme").await;
        let name = format!("race{round}.example.com");
        let ca = change(&a.node_id, NamesChange::Add, &[&name], &[]);
        let cb = change(&b.node_id, NamesChange::Add, &[&name], &[]);
        let (ra, rb) = tokio::join!(run(&f, &ca), run(&f, &cb));
        let (winner, loser_err) = match (ra, rb) {
            (Ok(_), Err(e)) => (a.node_id.clone(), e),
            (Err(e), Ok(_)) => (b.node_id.clone(), e),
            other => panic!("exactly one add wins: {other:?}"),
        };
        match loser_err {
            IdentityError::Names(NamesRefusal::HeldElsewhere {
                holder, name: n, ..
            }) => {
                assert_eq!((holder, n), (winner.clone(), name.clone()));
            }
            other => panic!("refused as held by the winner, got {other:?}"),
        }
        let holding: Vec<String> = names_events(&f)
            .await
            .into_iter()
            .filter(|e| e.dns_names.contains(&name))
            .map(|e| e.node_id)
            .collect();
        assert_eq!(holding, vec![winner]);
    }
}
