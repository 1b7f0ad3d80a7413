//! Log-store benchmark: our appends next to raw sqlx INSERTs of the same rows, batch appends,
//! and tail latency under a steady load, on Postgres and SQLite.
//!
//! Run: `cargo bench -p events --bench log_store` (DATABASE_URL names the Postgres server;
//! `-- --quick` for a short run). Each figure is the median of several rounds; ours and the
//! reference alternate inside each round so that machine noise hits both.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, TailerOptions};
use events::NewEvent;

struct Config {
    rounds: usize,
    round: Duration,
    tail_run: Duration,
}

fn event(i: u64, payload: Vec<u8>) -> NewEvent {
    NewEvent::from_bytes(
        events::new_event_id(),
        "bench.appended",
        1,
        "tenant-bench",
        i as i64,
        payload,
    )
}

fn payload() -> Vec<u8> {
    vec![0x5a; 200]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

/// One-event transactions through the store for `run`, from `writers` tasks; events/s.
async fn ours_single(store: &EventStore, writers: usize, run: Duration, tag: &str) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let stop = stop.clone();
        let count = count.clone();
        let stream = format!("bench/{tag}/{w}/{}", uuid::Uuid::new_v4().simple());
        tasks.push(tokio::spawn(async move {
            let mut version = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let expected = if version == 0 {
                    ExpectedVersion::NoStream
                } else {
                    ExpectedVersion::Exact(version)
                };
                let mut tx = store.begin().await.expect("begin");
                let a = tx
                    .append(&stream, expected, &[event(version, payload())])
                    .await
                    .expect("append");
                tx.commit().await.expect("commit");
                version = a.stream_version;
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    for t in tasks {
        t.await.expect("writer");
    }
    n as f64 / elapsed.as_secs_f64()
}

/// One table row: the medians, their ratio, and the median of each round's own ratio (ours and
/// the reference ran back to back in a round, so a round's ratio is the least exposed to the
/// machine's speed drifting between rounds).
fn report_row(writers: usize, ours: &[f64], raw: &[f64]) {
    let paired: Vec<f64> = ours.iter().zip(raw).map(|(o, r)| o / r).collect();
    let (o, r) = (median(ours.to_vec()), median(raw.to_vec()));
    println!(
        "| {writers} writers | {o:.0} | {r:.0} | {:.2} | {:.2} |",
        o / r,
        median(paired)
    );
}

/// The reference: the same rows by raw sqlx INSERT into a bare table, one per transaction.
async fn raw_single(store: &EventStore, writers: usize, run: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let stop = stop.clone();
        let count = count.clone();
        let stream = format!("raw/{w}/{}", uuid::Uuid::new_v4().simple());
        tasks.push(tokio::spawn(async move {
            let mut version = 0i64;
            while !stop.load(Ordering::Relaxed) {
                version += 1;
                let e = event(version as u64, payload());
                let sql = "INSERT INTO raw_events (stream_id, stream_version, event_id, \
                           event_type, schema_version, tenant_id, occurred_at_us, payload, \
                           payload_sha256) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
                match &store {
                    EventStore::Postgres(s) => {
                        let mut tx = s.pool().begin().await.expect("begin");
                        sqlx::query(sql)
                            .bind(&stream)
                            .bind(version)
                            .bind(&e.event_id[..])
                            .bind(&e.event_type)
                            .bind(e.schema_version as i32)
                            .bind(&e.tenant_id)
                            .bind(e.occurred_at_us)
                            .bind(e.payload())
                            .bind(&e.payload_sha256()[..])
                            .execute(&mut *tx)
                            .await
                            .expect("insert");
                        tx.commit().await.expect("commit");
                    }
                    EventStore::Sqlite(s) => {
                        let mut tx = s
                            .writer()
                            .begin_with("BEGIN IMMEDIATE")
                            .await
                            .expect("begin");
                        sqlx::query(sql)
                            .bind(&stream)
                            .bind(version)
                            .bind(&e.event_id[..])
                            .bind(&e.event_type)
                            .bind(e.schema_version as i32)
                            .bind(&e.tenant_id)
                            .bind(e.occurred_at_us)
                            .bind(e.payload())
                            .bind(&e.payload_sha256()[..])
                            .execute(&mut *tx)
                            .await
                            .expect("insert");
                        tx.commit().await.expect("commit");
                    }
                }
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    for t in tasks {
        t.await.expect("writer");
    }
    n as f64 / elapsed.as_secs_f64()
}

/// 100-event appends from `writers` tasks; events/s.
async fn ours_batches(store: &EventStore, writers: usize, run: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let stop = stop.clone();
        let count = count.clone();
        let stream = format!("batch/{w}/{}", uuid::Uuid::new_v4().simple());
        tasks.push(tokio::spawn(async move {
            let mut version = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<NewEvent> = (0..100).map(|i| event(i, payload())).collect();
                let a = store
                    .append(&stream, ExpectedVersion::Exact(version), &batch)
                    .await
                    .expect("append");
                version = a.stream_version;
                count.fetch_add(100, Ordering::Relaxed);
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    for t in tasks {
        t.await.expect("writer");
    }
    n as f64 / elapsed.as_secs_f64()
}

/// The reference for batches: the same 100 rows by one raw multi-row INSERT (unnest on
/// Postgres, a VALUES list on SQLite) per transaction.
async fn raw_batches(store: &EventStore, writers: usize, run: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let stop = stop.clone();
        let count = count.clone();
        let stream = format!("rawbatch/{w}/{}", uuid::Uuid::new_v4().simple());
        tasks.push(tokio::spawn(async move {
            let mut version = 0i64;
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<NewEvent> = (0..100).map(|i| event(i, payload())).collect();
                match &store {
                    EventStore::Postgres(s) => {
                        let versions: Vec<i64> = (1..=100).map(|i| version + i).collect();
                        let ids: Vec<&[u8]> = batch.iter().map(|e| &e.event_id[..]).collect();
                        let types: Vec<&str> = batch.iter().map(|e| e.event_type.as_str()).collect();
                        let svs: Vec<i32> = batch.iter().map(|e| e.schema_version as i32).collect();
                        let tenants: Vec<&str> = batch.iter().map(|e| e.tenant_id.as_str()).collect();
                        let ats: Vec<i64> = batch.iter().map(|e| e.occurred_at_us).collect();
                        let payloads: Vec<&[u8]> = batch.iter().map(|e| e.payload()).collect();
                        let shas: Vec<&[u8]> = batch.iter().map(|e| &e.payload_sha256()[..]).collect();
                        let mut tx = s.pool().begin().await.expect("begin");
                        sqlx::query(
                            "INSERT INTO raw_events (stream_id, stream_version, event_id, \
                             event_type, schema_version, tenant_id, occurred_at_us, payload, \
                             payload_sha256) SELECT $1, v, id, ty, sv, te, at, pl, sh FROM \
                             unnest($2::int8[], $3::bytea[], $4::text[], $5::int4[], $6::text[], \
                             $7::int8[], $8::bytea[], $9::bytea[]) AS u(v, id, ty, sv, te, at, pl, sh)",
                        )
                        .bind(&stream)
                        .bind(&versions)
                        .bind(&ids)
                        .bind(&types)
                        .bind(&svs)
                        .bind(&tenants)
                        .bind(&ats)
                        .bind(&payloads)
                        .bind(&shas)
                        .execute(&mut *tx)
                        .await
                        .expect("insert");
                        tx.commit().await.expect("commit");
                    }
                    EventStore::Sqlite(s) => {
                        let mut tx = s.writer().begin_with("BEGIN IMMEDIATE").await.expect("begin");
                        for (i, e) in batch.iter().enumerate() {
                            sqlx::query(
                                "INSERT INTO raw_events (stream_id, stream_version, event_id, \
                                 event_type, schema_version, tenant_id, occurred_at_us, payload, \
                                 payload_sha256) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                            )
                            .bind(&stream)
                            .bind(version + i as i64 + 1)
                            .bind(&e.event_id[..])
                            .bind(&e.event_type)
                            .bind(e.schema_version as i32)
                            .bind(&e.tenant_id)
                            .bind(e.occurred_at_us)
                            .bind(e.payload())
                            .bind(&e.payload_sha256()[..])
                            .execute(&mut *tx)
                            .await
                            .expect("insert");
                        }
                        tx.commit().await.expect("commit");
                    }
                }
                version += 100;
                count.fetch_add(100, Ordering::Relaxed);
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    for t in tasks {
        t.await.expect("writer");
    }
    n as f64 / elapsed.as_secs_f64()
}

/// Commit-to-delivery latency under a steady `rate` appends/s. The tailer runs on `tail_store`:
/// the writer's own store (woken in-process at commit) or a second store on the same database,
/// which sees commits only by polling, as a gateway in another process would.
async fn tail_latency(
    store: &EventStore,
    tail_store: &EventStore,
    rate: u32,
    run: Duration,
) -> (Duration, Duration, usize) {
    let origin = Instant::now();
    let mut tailer = tail_store.tailer(
        tail_store.now_cursor().await.expect("cursor"),
        TailerOptions::default(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    // Several paced writers, so the rate holds even when one commit takes a few milliseconds.
    const WRITERS: u32 = 8;
    let mut writers = Vec::new();
    for _ in 0..WRITERS {
        let store = store.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut interval =
                tokio::time::interval(Duration::from_secs_f64(WRITERS as f64 / rate as f64));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut sent = 0u64;
            let stream = format!("tail/{}", uuid::Uuid::new_v4().simple());
            while !stop.load(Ordering::Relaxed) {
                interval.tick().await;
                let mut tx = store.begin().await.expect("begin");
                // The stamp is taken before the commit is sent: latency includes the commit.
                let stamp = origin.elapsed().as_nanos() as u64;
                tx.append(
                    &stream,
                    ExpectedVersion::Any,
                    &[event(sent, stamp.to_be_bytes().to_vec())],
                )
                .await
                .expect("append");
                tx.commit().await.expect("commit");
                sent += 1;
            }
            sent
        }));
    }
    let mut latencies = Vec::new();
    let deadline = Instant::now() + run;
    while Instant::now() < deadline {
        let Ok(batch) = tokio::time::timeout(Duration::from_millis(500), tailer.next_batch()).await
        else {
            continue;
        };
        let now = origin.elapsed().as_nanos() as u64;
        for e in batch.expect("tail") {
            let stamp = u64::from_be_bytes(e.payload[..8].try_into().expect("stamp"));
            latencies.push(Duration::from_nanos(now.saturating_sub(stamp)));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut sent = 0;
    for w in writers {
        sent += w.await.expect("writer");
    }
    // Drain what is still in flight so every sent event is accounted for.
    let mut drained = latencies.len() as u64;
    while drained < sent {
        match tokio::time::timeout(Duration::from_secs(2), tailer.next_batch()).await {
            Ok(Ok(b)) => drained += b.len() as u64,
            _ => break,
        }
    }
    assert_eq!(drained, sent, "the tailer delivered every committed event");
    latencies.sort_unstable();
    (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.len(),
    )
}

async fn make_raw_table(store: &EventStore) {
    let mut tx = store.begin().await.expect("begin");
    let sql = match store {
        EventStore::Postgres(_) => {
            "CREATE TABLE raw_events (position BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
             stream_id TEXT NOT NULL, stream_version BIGINT NOT NULL, event_id BYTEA NOT NULL, \
             event_type TEXT NOT NULL, schema_version INTEGER NOT NULL, tenant_id TEXT NOT NULL, \
             occurred_at_us BIGINT NOT NULL, payload BYTEA NOT NULL, payload_sha256 BYTEA NOT NULL)"
        }
        EventStore::Sqlite(_) => {
            "CREATE TABLE raw_events (position INTEGER PRIMARY KEY AUTOINCREMENT, \
             stream_id TEXT NOT NULL, stream_version INTEGER NOT NULL, event_id BLOB NOT NULL, \
             event_type TEXT NOT NULL, schema_version INTEGER NOT NULL, tenant_id TEXT NOT NULL, \
             occurred_at_us INTEGER NOT NULL, payload BLOB NOT NULL, payload_sha256 BLOB NOT NULL)"
        }
    };
    tx.execute(sql, &[]).await.expect("raw table");
    tx.commit().await.expect("commit");
}

async fn run_backend(name: &str, db: &TestDb, cfg: &Config) {
    let store = match &db {
        d if d.is_postgres() => EventStore::Postgres(d.pg_store(40).await.expect("store")),
        d => d.store().await.expect("store"),
    };
    make_raw_table(&store).await;
    // `LOG_STORE_BENCH_ONLY=single` (or `batches`, `tail`) runs one part only.
    let only = std::env::var("LOG_STORE_BENCH_ONLY").unwrap_or_default();
    let part = |p: &str| only.is_empty() || only.contains(p);
    println!("\n## {name}\n");
    if part("single") {
        single_appends(&store, name, cfg).await;
    }
    if part("batches") {
        batch_appends(&store, cfg).await;
    }
    if part("tail") {
        tail_latencies(db, &store, cfg).await;
    }
}

async fn single_appends(store: &EventStore, name: &str, cfg: &Config) {
    println!(
        "| appends, one event per transaction | ours (events/s) | raw INSERT (events/s) | ratio of medians | median of paired ratios |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    for writers in [1usize, 4, 16] {
        let mut ours = Vec::new();
        let mut raw = Vec::new();
        for r in 0..cfg.rounds {
            // Alternate which goes first so neither always gets the warmer cache.
            if r % 2 == 0 {
                ours.push(ours_single(store, writers, cfg.round, name).await);
                raw.push(raw_single(store, writers, cfg.round).await);
            } else {
                raw.push(raw_single(store, writers, cfg.round).await);
                ours.push(ours_single(store, writers, cfg.round, name).await);
            }
        }
        report_row(writers, &ours, &raw);
    }
    println!();
}

async fn batch_appends(store: &EventStore, cfg: &Config) {
    println!("| 100-event batch appends | ours (events/s) | raw INSERT (events/s) | ratio of medians | median of paired ratios |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for writers in [1usize, 4, 8] {
        let mut ours = Vec::new();
        let mut raw = Vec::new();
        for r in 0..cfg.rounds {
            if r % 2 == 0 {
                ours.push(ours_batches(store, writers, cfg.round).await);
                raw.push(raw_batches(store, writers, cfg.round).await);
            } else {
                raw.push(raw_batches(store, writers, cfg.round).await);
                ours.push(ours_batches(store, writers, cfg.round).await);
            }
        }
        report_row(writers, &ours, &raw);
    }
    println!();
}

async fn tail_latencies(db: &TestDb, store: &EventStore, cfg: &Config) {
    println!("| tail latency at 1,000 appends/s | p50 | p99 | events |");
    println!("| --- | ---: | ---: | ---: |");
    let (p50, p99, n) = tail_latency(store, store, 1000, cfg.tail_run).await;
    println!(
        "| same process (woken at commit) | {:.2} ms | {:.2} ms | {n} in {:?} |",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        cfg.tail_run
    );
    let other = EventStore::connect(db.url()).await.expect("second store");
    let (p50, p99, n) = tail_latency(store, &other, 1000, cfg.tail_run).await;
    println!(
        "| other process (polling every 20 ms) | {:.2} ms | {:.2} ms | {n} in {:?} |",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        cfg.tail_run
    );
}

/// The allocator bcctl (the server that appends) runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let cfg = if quick {
        Config {
            rounds: 1,
            round: Duration::from_millis(500),
            tail_run: Duration::from_secs(2),
        }
    } else {
        Config {
            rounds: 9,
            round: Duration::from_secs(2),
            tail_run: Duration::from_secs(10),
        }
    };
    println!(
        "# log_store benchmark ({} rounds of {:?}; medians)",
        cfg.rounds, cfg.round
    );
    // `LOG_STORE_BENCH_BACKENDS=postgres` (or `sqlite`) runs one backend only.
    let only = std::env::var("LOG_STORE_BENCH_BACKENDS").unwrap_or_default();
    if only.is_empty() || only.contains("postgres") {
        let pg = TestDb::postgres().await.expect("postgres test database");
        run_backend("Postgres", &pg, &cfg).await;
    }
    if only.is_empty() || only.contains("sqlite") {
        let lite = TestDb::sqlite().expect("sqlite test database");
        run_backend("SQLite", &lite, &cfg).await;
    }
}
