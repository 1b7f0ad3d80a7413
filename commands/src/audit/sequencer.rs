//! The sequencer: every event into its tenant's Merkle log, exactly once, in commit-visibility
//! order, crash-safe.
//!
//! One step ([`Sequencer::step`]) is one transaction:
//!
//! 1. take the per-step lock (`projections::audit::trees`): `pg_try_advisory_xact_lock` on
//!    Postgres (another sequencer holding it makes this one a follower for the step:
//!    [`StepOutcome::NotLeader`]); on SQLite the write transaction is already exclusive. A
//!    serving process runs the sequencer only while it leads the `audit-sequencer` task
//!    ([`crate::leadership`]); this lock is the second guard, for the moments two processes
//!    believe they lead, and for `bcctl audit seal`'s own catch-up;
//! 2. read the stored cursor (`audit_sequencer`); if it is not the one this sequencer last
//!    committed (another process sequenced meanwhile, or this one just started), drop every cached
//!    tree and resume from the stored one;
//! 3. one exact-tailer step from the cursor (a read: writers never wait on the sequencer); when
//!    it finds the snapshot the cursor was paging through exhausted, a second step from a fresh
//!    snapshot, so that "idle" always means "nothing new as of this step" (a stored cursor may
//!    carry a snapshot taken long ago);
//! 4. for each event, in the order the tailer hands them out: its tenant's next index, its leaf
//!    hash ([`AuditLeaf::from_event`]), appended to the tenant's [`Frontier`] (loaded from the
//!    stored nodes on first use);
//! 5. insert the leaf rows and every completed interior node, update each touched tenant's size
//!    and the cursor, commit.
//!
//! Because the leaves, nodes, sizes and cursor commit together, a sequencer killed at any point
//! resumes exactly where its last commit left off; `audit_leaves.position` is unique, so an event
//! can never be sequenced twice even by a buggy second leader.

use std::collections::HashMap;
use std::time::Duration;

use domain::audit::{AuditLeaf, Frontier, Hash};
use events::store::{EventStore, LogStore, LogTx, TailCursor};
use events::RecordedEvent;
use projections::audit::{trees, NewLeaf, NewNode, ReadFrom};

use super::error::{to_i64, AuditError};
use super::nodes;

/// The sequencer's safety poll: how long [`Sequencer::run`], caught up, waits for a commit
/// signal before it looks at the log anyway. The store's commit signal wakes it for every commit,
/// this process's and (on Postgres, by notification) the other processes', so this poll only
/// bounds what a lost notification costs: an event sequenced at most this late. Idle, it costs
/// one read transaction per interval in the one process that leads the sequencer.
pub const SAFETY_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How long [`Sequencer::catch_up`] waits before it tries again while another sequencer holds
/// the per-step lock (one step: a short wait).
pub const LOCK_RETRY_INTERVAL: Duration = Duration::from_millis(50);

/// How the sequencer pages and waits.
#[derive(Clone, Copy, Debug)]
pub struct SequencerOptions {
    /// Most events per step (per transaction).
    pub batch: u32,
    /// How long [`Sequencer::run`] waits for a commit signal before looking again
    /// ([`SAFETY_POLL_INTERVAL`] by default).
    pub poll_interval: Duration,
}

impl Default for SequencerOptions {
    fn default() -> Self {
        SequencerOptions {
            batch: 5000,
            poll_interval: SAFETY_POLL_INTERVAL,
        }
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// This many events were sequenced and committed.
    Sequenced(usize),
    /// Nothing new is visible: the sequencer is caught up with the log.
    Idle,
    /// Another sequencer holds the lock; nothing was done.
    NotLeader,
}

/// The sequencer. Cheap to create; state (cursor, trees) is cached between steps and re-read from
/// the store whenever another sequencer may have moved it.
pub struct Sequencer {
    store: EventStore,
    options: SequencerOptions,
    /// The cursor this sequencer last committed (or read), as stored.
    committed: Option<String>,
    /// The cursor to read from: `committed`, or past empty steps since.
    cursor: Option<TailCursor>,
    sequenced: u64,
    trees: HashMap<String, Frontier>,
}

impl Sequencer {
    pub fn new(store: EventStore, options: SequencerOptions) -> Self {
        Sequencer {
            store,
            options,
            committed: None,
            cursor: None,
            sequenced: 0,
            trees: HashMap::new(),
        }
    }

    /// Events sequenced in the whole store so far (as of this sequencer's last step).
    pub fn sequenced(&self) -> u64 {
        self.sequenced
    }

    /// One batch (see the module doc).
    pub async fn step(&mut self) -> Result<StepOutcome, AuditError> {
        let mut tx = self.store.begin().await?;
        let outcome = self.step_in(&mut tx).await;
        match outcome {
            Ok(Some(pending)) => {
                tx.commit().await?;
                let n = pending.events;
                self.committed = Some(pending.cursor.to_string());
                self.cursor = Some(pending.cursor);
                self.sequenced = pending.sequenced;
                for (tenant, frontier) in pending.trees {
                    self.trees.insert(tenant, frontier);
                }
                Ok(StepOutcome::Sequenced(n))
            }
            Ok(None) => {
                let _ = tx.rollback().await;
                Ok(if self.committed.is_none() && self.cursor.is_none() {
                    StepOutcome::NotLeader
                } else {
                    StepOutcome::Idle
                })
            }
            Err(e) => {
                let _ = tx.rollback().await;
                // Whatever was cached may be ahead of the store now.
                self.forget();
                Err(e)
            }
        }
    }

    fn forget(&mut self) {
        self.committed = None;
        self.cursor = None;
        self.trees.clear();
    }

    /// The body of a step. `Ok(None)`: nothing to commit (idle, or not the leader, told apart by
    /// whether a cursor is known).
    async fn step_in(
        &mut self,
        tx: &mut events::store::StoreTx,
    ) -> Result<Option<Pending>, AuditError> {
        if !trees::try_sequencer_lock(tx).await? {
            self.forget();
            return Ok(None);
        }
        let stored = trees::read_cursor(tx).await?;
        let stored_text = stored.as_ref().map(|(c, _)| c.clone());
        if stored_text != self.committed || self.cursor.is_none() {
            self.trees.clear();
            self.sequenced = stored.as_ref().map_or(0, |(_, n)| *n);
            self.cursor = Some(match &stored {
                Some((text, _)) => text.parse::<TailCursor>()?,
                None => self.store.start_cursor(),
            });
            self.committed = stored_text;
        }
        let Some(cursor) = self.cursor.clone() else {
            return Ok(None);
        };

        let (mut events, mut next) = self.store.tail_step(&cursor, self.options.batch).await?;
        if events.is_empty() && has_ceiling(&cursor) {
            // The snapshot being paged through is exhausted, but it may be old (a stored cursor
            // whose last batch was full, or one taken many steps ago): look at the present
            // before calling the log caught up, or `catch_up` would return with later commits
            // unsequenced.
            (events, next) = self.store.tail_step(&next, self.options.batch).await?;
        }
        if events.is_empty() {
            // Nothing committed between the snapshots: moving on needs no write.
            self.cursor = Some(next);
            return Ok(None);
        }

        let mut work = Batch::default();
        for event in &events {
            let tenant = event.tenant_id.as_str();
            if !work.trees.contains_key(tenant) {
                let frontier = match self.trees.get(tenant) {
                    Some(f) => f.clone(),
                    None => nodes::load_frontier(&mut ReadFrom::Tx(tx), tenant).await?,
                };
                work.trees.insert(tenant, frontier);
            }
            let Some(tree) = work.trees.get_mut(tenant) else {
                return Err(AuditError::Corrupt(format!("tree of {tenant} vanished")));
            };
            let index = tree.size();
            let leaf = leaf_hash(event, index)?;
            let position = event.position;
            let index_i = to_i64(index, "leaf index")?;
            work.leaves.push(NewLeaf {
                tenant,
                index: index_i,
                position,
                hash: leaf,
            });
            let mut overflow = None;
            tree.push(leaf, |id, hash| {
                if id.level > 0 {
                    match (i32::try_from(id.level), i64::try_from(id.index)) {
                        (Ok(level), Ok(index)) => work.nodes.push(NewNode {
                            tenant,
                            level,
                            index,
                            hash: *hash,
                        }),
                        _ => overflow = Some(id),
                    }
                }
            });
            if let Some(id) = overflow {
                return Err(AuditError::Corrupt(format!(
                    "node (level {}, index {}) does not fit the audit_nodes columns",
                    id.level, id.index
                )));
            }
        }

        trees::insert_leaves(tx, &work.leaves).await?;
        trees::insert_nodes(tx, &work.nodes).await?;
        for (tenant, tree) in &work.trees {
            trees::set_tree_size(tx, tenant, tree.size()).await?;
        }
        let sequenced = self.sequenced + events.len() as u64;
        trees::write_cursor(tx, &next.to_string(), sequenced).await?;
        let trees = work
            .trees
            .into_iter()
            .map(|(t, f)| (t.to_string(), f))
            .collect();
        Ok(Some(Pending {
            events: events.len(),
            cursor: next,
            sequenced,
            trees,
        }))
    }

    /// Steps until the log is caught up (as of the last step), waiting while another sequencer
    /// leads. Returns the number of events this call sequenced.
    pub async fn catch_up(&mut self) -> Result<u64, AuditError> {
        let mut total = 0u64;
        loop {
            match self.step().await? {
                StepOutcome::Sequenced(n) => total += n as u64,
                StepOutcome::Idle => {
                    if matches!(
                        self.cursor,
                        Some(TailCursor::Postgres {
                            ceiling: Some(_),
                            ..
                        })
                    ) {
                        continue;
                    }
                    return Ok(total);
                }
                StepOutcome::NotLeader => tokio::time::sleep(LOCK_RETRY_INTERVAL).await,
            }
        }
    }

    /// Runs until `shutdown` turns true (or its sender is dropped): steps while there is work,
    /// otherwise waits for the store's commit signal or the safety poll
    /// ([`SequencerOptions::poll_interval`]). A serving process runs this only while it leads
    /// the `audit-sequencer` task ([`crate::leadership`]); the per-step lock stays as a second
    /// guard.
    pub async fn run(
        mut self,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), AuditError> {
        let mut wake = self.store.commit_signal();
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            wake.borrow_and_update();
            match self.step().await? {
                StepOutcome::Sequenced(_) => continue,
                StepOutcome::Idle
                    if matches!(
                        self.cursor,
                        Some(TailCursor::Postgres {
                            ceiling: Some(_),
                            ..
                        })
                    ) =>
                {
                    continue
                }
                StepOutcome::Idle | StepOutcome::NotLeader => {}
            }
            tokio::select! {
                r = shutdown.changed() => if r.is_err() { return Ok(()) },
                _ = wake.changed() => {}
                _ = tokio::time::sleep(self.options.poll_interval) => {}
            }
        }
    }
}

/// Whether the cursor is in the middle of delivering a snapshot (Postgres), which may be old.
fn has_ceiling(cursor: &TailCursor) -> bool {
    matches!(
        cursor,
        TailCursor::Postgres {
            ceiling: Some(_),
            ..
        }
    )
}

fn leaf_hash(event: &RecordedEvent, index: u64) -> Result<Hash, AuditError> {
    AuditLeaf::from_event(event, index)
        .leaf_hash()
        .map_err(|source| AuditError::Leaf {
            position: event.position,
            source,
        })
}

#[derive(Default)]
struct Batch<'a> {
    trees: HashMap<&'a str, Frontier>,
    leaves: Vec<NewLeaf<'a>>,
    nodes: Vec<NewNode<'a>>,
}

struct Pending {
    events: usize,
    cursor: TailCursor,
    sequenced: u64,
    trees: Vec<(String, Frontier)>,
}
