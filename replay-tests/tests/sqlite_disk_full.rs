//! The SQLite store's disk filling up during an append (issue 17, "faults survived"), on a real
//! full filesystem: a small tmpfs mounted for the test (the test runs as root, as CI does on
//! this machine; where mounting is not permitted it says so and stops without asserting).
//!
//! Commands (token creations: an append and its inline projections in one transaction) run
//! until the disk is full. The one that hits the full disk fails with the typed
//! [`StoreError::DiskFull`] and its operator message; nothing of it is in the store (the events,
//! the head and every identity table are exactly as before it); a second try while still full
//! fails the same way (the writer connection is not left stuck); once space is freed the same
//! open store takes commands again; reopened, the file passes `PRAGMA integrity_check`, and
//! rebuilding every identity projection from the log gives the same tables.
//!
//! Run: `cargo test -p replay-tests --test suite sqlite_disk_full::` (as root).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use commands::identity::{IdentityConfig, IdentityError, JoinService, NewToken};
use commands::{Clock, RunError, SystemClock};
use domain::identity::{ExpectBinding, TokenRole};
use domain::pki::{KeySet, KeySetLifetimes, TrustDomain};
use events::store::{EventStore, StoreError};
use projections::ProjectionError;

/// A tmpfs mounted at a fresh directory, unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (after saying why) when this process may not mount.
    fn mount(size: &str) -> Option<Tmpfs> {
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = parent.path().join("full");
        fs::create_dir(&dir).expect("mkdir");
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&dir)
            .output()
            .expect("run mount");
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            eprintln!(
                "SKIPPED sqlite_disk_full: cannot mount a tmpfs here ({}): {why}run it as root",
                out.status
            );
            return None;
        }
        Some(Tmpfs {
            dir,
            _parent: parent,
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// Fills the filesystem holding `path` to the last byte, then frees `leave` bytes of it.
fn fill(path: &Path, leave: u64) {
    let mut f = fs::File::create(path).expect("filler");
    let chunk = vec![0x5au8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    f.sync_all().ok();
    f.set_len(written.saturating_sub(leave)).expect("free some");
    f.sync_all().expect("sync filler");
}

fn token() -> NewToken {
    NewToken {
        tenant_id: "t1".into(),
        site_id: "s1".into(),
        pool_id: "p1".into(),
        role: TokenRole::Node,
        uses: 1,
        ttl_seconds: 3600,
        expect: ExpectBinding::default(),
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
    }
}

/// The store error inside a command's error.
fn store_error(e: &IdentityError) -> Option<&StoreError> {
    match e {
        IdentityError::Run(RunError::Store(s))
        | IdentityError::Run(RunError::Projection(ProjectionError::Store(s))) => Some(s),
        _ => None,
    }
}

/// What the store holds: its event count and head, and the digest of every identity table.
async fn state(store: &EventStore) -> (i64, i64, String) {
    let status = store.status().await.expect("status");
    let digest = projections::digest_tables(store, &projections::identity::tables())
        .await
        .expect("digest");
    (status.events, status.head_position, digest)
}

async fn close(store: EventStore) {
    if let EventStore::Sqlite(s) = &store {
        s.close().await;
    }
}

fn join_service(store: &EventStore, keys: &Arc<KeySet>) -> JoinService {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    JoinService::new(
        store.clone(),
        keys.clone(),
        clock,
        IdentityConfig::new(keys.trust_domain.clone()),
    )
    .expect("join service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_append_cleanly_and_the_store_reopens_whole() {
    let Some(fs_) = Tmpfs::mount("8m") else {
        return;
    };
    let url = format!("sqlite://{}", fs_.dir.join("events.db").display());
    let store = EventStore::open(&url).await.expect("open the store");
    let keys = Arc::new(
        KeySet::generate(
            TrustDomain::new("full.test").expect("td"),
            time::OffsetDateTime::now_utc() - time::Duration::days(1),
            KeySetLifetimes::default(),
        )
        .expect("keys"),
    );
    let join = join_service(&store, &keys);
    for _ in 0..5 {
        join.create_token(&token())
            .await
            .expect("a token on a roomy disk");
    }

    // Leave 64 KiB: a few more commands fit, then one hits the full disk.
    let filler = fs_.dir.join("filler");
    fill(&filler, 64 * 1024);
    let mut created = 5;
    let (before, failure) = loop {
        let before = state(&store).await;
        match join.create_token(&token()).await {
            Ok(_) => created += 1,
            Err(e) => break (before, e),
        }
        assert!(created < 2_000, "64 KiB never filled up");
    };
    let Some(StoreError::DiskFull { backend, detail }) = store_error(&failure) else {
        panic!("after {created} tokens: not a typed disk-full error: {failure:?}");
    };
    assert_eq!(*backend, "SQLite");
    assert_eq!(detail, "database or disk is full");
    assert!(
        failure.to_string().ends_with(
            "the disk holding the SQLite store is full (database or disk is full): this \
             transaction was rolled back and nothing of it was written; free space on that \
             filesystem (for SQLite, where the database file and its -wal file live), then retry"
        ),
        "{failure}"
    );
    // Nothing of the failed command was written.
    assert_eq!(
        state(&store).await,
        before,
        "the failed command left something"
    );
    assert_eq!(before.0, created, "one event per token created");

    // Still full: the same clean error, not a stuck writer.
    let again = join.create_token(&token()).await.expect_err("still full");
    assert!(
        matches!(store_error(&again), Some(StoreError::DiskFull { .. })),
        "{again:?}"
    );
    assert_eq!(state(&store).await, before);

    // Space freed: the same open store takes commands again.
    fs::remove_file(&filler).expect("free the disk");
    join.create_token(&token())
        .await
        .expect("a token once there is room");
    let live = state(&store).await;
    assert_eq!(live.0, created + 1);
    drop(join);
    close(store).await;

    // Reopened: a whole file, the same state, and the log rebuilds to the same tables.
    let store = EventStore::open(&url).await.expect("reopen");
    let EventStore::Sqlite(s) = &store else {
        unreachable!("a sqlite URL")
    };
    assert_eq!(s.integrity_check().await.expect("integrity check"), "ok");
    assert_eq!(state(&store).await, live);
    let all = projections::identity::all();
    projections::rebuild(&store, &all, None, 100, |_| {})
        .await
        .expect("rebuild");
    assert_eq!(state(&store).await, live, "the rebuilt tables differ");
    close(store).await;
}
