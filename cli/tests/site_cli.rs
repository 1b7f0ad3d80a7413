//! `bcctl site create | list | show`, `bcctl site boot add | list | remove` and `bcctl site
//! lease fence` through the real binary on both backends: the `--json` output key by key
//! (camelCase), the text tables, refusals exit 1 naming what to fix, usage errors exit 2.

use crate::support;

use std::path::Path;

use serde_json::{json, Value};
use support::{bcctl_at, ok_json};

use events::store::testkit::TestDb;

fn fails_with(dir: &Path, url: &str, args: &[&str], needle: &str, code: i32) {
    let out = bcctl_at(dir, url, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "bcctl {args:?}: {err}");
    assert!(
        err.contains(needle),
        "bcctl {args:?}: {err:?} lacks {needle:?}"
    );
}

fn int(v: &Value, field: &str) -> i64 {
    v[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} is not an integer in {v}"))
}

fn pki_init(dir: &Path, url: &str) {
    let init = bcctl_at(
        dir,
        url,
        &[
            "pki",
            "init",
            "--trust-domain",
            "cli.example.com",
            "--plaintext",
        ],
    );
    assert!(init.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_verbs_on_both_backends() {
    for db in TestDb::each().await.expect("databases") {
        db.store().await.expect("the store, migrated"); // the verbs never create one
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        pki_init(d, &url);

        let create = [
            "site",
            "create",
            "--id",
            "par1",
            "--tenant",
            "acme",
            "--default-pool",
            "edge",
            "--description",
            "Paris",
            "--json",
        ];
        let site = ok_json(d, &url, &create);
        let created = int(&site, "createdAtUs");
        let position = int(&site, "position");
        assert_eq!(
            site,
            json!({
                "siteId": "par1",
                "tenantId": "acme",
                "description": "Paris",
                "defaultPoolId": "edge",
                "createdBy": support::local_actor(),
                "createdAtUs": created,
                "updatedAtUs": created,
                "version": 1,
                "position": position,
            })
        );
        fails_with(
            d,
            &url,
            &create,
            "INVALID_STATE: site par1 already exists",
            1,
        );
        fails_with(
            d,
            &url,
            &["site", "create", "--id", "Par1", "--tenant", "acme"],
            "INVALID_INPUT: site id \"Par1\" must be 1 to 63 of lower-case a-z, 0-9 and '-'",
            1,
        );
        fails_with(d, &url, &["site", "create", "--id", "x"], "--tenant", 2);
        let list = ok_json(d, &url, &["site", "list", "--json"]);
        assert_eq!(list, json!([site.clone()]));

        let add = [
            "site",
            "boot",
            "add",
            "--site",
            "par1",
            "--mac",
            "AA-BB-CC-DD-EE-01",
            "--product-uuid",
            "4c4c4544-0000-1000-8000-000000000001",
            "--kernel",
            "http://boot.example/vmlinuz",
            "--initrd",
            "http://boot.example/initrd",
            "--args",
            "console=ttyS0",
            "--expires-in",
            "2h",
            "--json",
        ];
        let entry = ok_json(d, &url, &add);
        let id = entry["entryId"].as_str().expect("entryId").to_owned();
        assert!(id.starts_with("boot_") && id.len() == 37, "{id}");
        let at = int(&entry, "createdAtUs");
        assert_eq!(int(&entry, "notAfterUs"), at + 2 * 3600 * 1_000_000);
        assert_eq!(
            entry,
            json!({
                "entryId": id,
                "siteId": "par1",
                "tenantId": "acme",
                "mac": "aa:bb:cc:dd:ee:01",
                "productUuid": "4c4c4544-0000-1000-8000-000000000001",
                "kernelUrl": "http://boot.example/vmlinuz",
                "initrdUrl": "http://boot.example/initrd",
                "kernelArgs": "console=ttyS0",
                "poolId": "edge",
                "notAfterUs": at + 2 * 3600 * 1_000_000,
                "addedBy": support::local_actor(),
                "status": "active",
                "removedBy": null,
                "removeReason": null,
                "createdAtUs": at,
                "updatedAtUs": at,
                "position": int(&entry, "position"),
            })
        );
        fails_with(
            d,
            &url,
            &add,
            &format!("INVALID_STATE: site par1 already has active boot entry {id} for MAC aa:bb:cc:dd:ee:01 (give --replace"),
            1,
        );
        let mut bad_expiry = add.to_vec();
        bad_expiry[16] = "soon";
        fails_with(d, &url, &bad_expiry, "--expires-in", 2);
        let mut replace = add.to_vec();
        replace.push("--replace");
        let second = ok_json(d, &url, &replace);
        let second_id = second["entryId"].as_str().expect("entryId").to_owned();
        let listed = ok_json(
            d,
            &url,
            &["site", "boot", "list", "--site", "par1", "--json"],
        );
        let states: Vec<(String, String)> = listed
            .as_array()
            .expect("a list")
            .iter()
            .map(|e| {
                (
                    e["entryId"].as_str().unwrap_or_default().to_owned(),
                    e["status"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            states,
            [
                (id.clone(), "removed".into()),
                (second_id.clone(), "active".into())
            ]
        );
        let removed = ok_json(
            d,
            &url,
            &[
                "site", "boot", "remove", &second_id, "--reason", "done", "--json",
            ],
        );
        assert_eq!(
            (removed["status"].clone(), removed["removeReason"].clone()),
            (json!("removed"), json!("done"))
        );
        fails_with(
            d,
            &url,
            &["site", "boot", "remove", &second_id],
            &format!("INVALID_STATE: boot entry {second_id} is already removed"),
            1,
        );

        let shown = ok_json(d, &url, &["site", "show", "par1", "--json"]);
        let keys: Vec<&String> = shown.as_object().expect("an object").keys().collect();
        assert_eq!(keys, ["bootEntries", "lease", "site"]);
        assert_eq!(shown["lease"], Value::Null);
        assert_eq!(shown["bootEntries"].as_array().map(Vec::len), Some(2));
        assert_eq!(shown["site"]["version"], json!(5));
        fails_with(
            d,
            &url,
            &["site", "lease", "fence", "--site", "par1"],
            "INVALID_STATE: the boot lease of site par1 is not held",
            1,
        );
        fails_with(
            d,
            &url,
            &["site", "show", "nope"],
            "NOT_FOUND: no site nope",
            1,
        );

        // The text forms.
        let out = bcctl_at(d, &url, &["site", "show", "par1"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success());
        assert!(text.contains("boot lease: never held"), "{text}");
        assert!(text.contains("aa:bb:cc:dd:ee:01"), "{text}");
    }
}

fn serve_refuses(dir: &Path, table: &str, needle: &str) {
    let config = dir.join("serve.toml");
    std::fs::write(&config, table).expect("config");
    let out = std::process::Command::new(support::bcctl_bin())
        .current_dir(dir)
        .args(["serve", "--pki-bundle", "pki.json", "--config"])
        .arg(&config)
        .env(
            "DATABASE_URL",
            format!("sqlite://{}/events.db", dir.display()),
        )
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_SITES_BOOT_LEASE_TTL")
        .env("BC_METRICS_LISTEN", "off")
        .output()
        .expect("bcctl serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{table}: {err}");
    assert!(err.contains(needle), "{table}: {err:?} lacks {needle:?}");
}

#[test]
fn serve_refuses_a_bad_sites_table_naming_the_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let init = bcctl_at(
        d,
        "sqlite://unused.db",
        &[
            "pki",
            "init",
            "--trust-domain",
            "cli.example.com",
            "--out",
            "pki.json",
            "--plaintext",
        ],
    );
    assert!(init.status.success());
    serve_refuses(
        d,
        "[sites]\nboot_lease_ttl = \"500ms\"\n",
        "sites.boot_lease_ttl: 500ms is too short: at least \"1s\"",
    );
    serve_refuses(
        d,
        "[sites]\nboot_lease_ttl = \"soon\"\n",
        "sites.boot_lease_ttl",
    );
    serve_refuses(d, "[sites]\nlease = \"60s\"\n", "unknown field `lease`");
}
