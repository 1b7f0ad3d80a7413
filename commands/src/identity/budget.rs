//! The refusals a process suppressed and has not written yet ([`RefusalBudget`]), shared by
//! every handler built from one config (see `refusals` for how they are recorded).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// (kind, refusal, window start, tenant) of a suppressed count.
pub(super) type CountKey = (String, String, i64, String);

#[derive(Default)]
struct BudgetState {
    /// The window each (kind, refusal) is known to have reached its bound in (only the latest).
    full: HashMap<(String, String), i64>,
    /// Suppressed refusals not written yet.
    held: BTreeMap<CountKey, u64>,
}

/// The refusals a process suppressed and has not written yet, and the windows it knows are
/// full. Its size is bounded by the reasons (a fixed set), the tenants a refusal can be
/// attributed to (only a matched token's) and the windows not flushed yet (one or two).
#[derive(Default)]
pub struct RefusalBudget {
    state: Mutex<BudgetState>,
}

impl std::fmt::Debug for RefusalBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RefusalBudget {{ held: {} }}", self.held())
    }
}

impl RefusalBudget {
    /// An empty budget.
    pub fn new() -> Self {
        RefusalBudget::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        // A panic while holding the lock leaves plain counters behind: still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Suppressed refusals held in memory, not written yet.
    pub fn held(&self) -> u64 {
        self.lock().held.values().sum()
    }

    /// Counts the refusal as suppressed, with no store access, when its window is known full.
    pub(super) fn suppress_if_full(
        &self,
        kind: &str,
        refusal: &str,
        tenant: &str,
        window: i64,
    ) -> bool {
        let mut state = self.lock();
        if state.full.get(&(kind.to_owned(), refusal.to_owned())) != Some(&window) {
            return false;
        }
        *state
            .held
            .entry((
                kind.to_owned(),
                refusal.to_owned(),
                window,
                tenant.to_owned(),
            ))
            .or_insert(0) += 1;
        true
    }

    /// The store said the window is full: remember it, and count this refusal.
    pub(super) fn count_over_bound(&self, kind: &str, refusal: &str, tenant: &str, window: i64) {
        let mut state = self.lock();
        state
            .full
            .insert((kind.to_owned(), refusal.to_owned()), window);
        *state
            .held
            .entry((
                kind.to_owned(),
                refusal.to_owned(),
                window,
                tenant.to_owned(),
            ))
            .or_insert(0) += 1;
    }

    /// Takes the counts of windows before `before` (every count with `None`).
    pub(super) fn take(&self, before: Option<i64>) -> Vec<(CountKey, u64)> {
        let mut state = self.lock();
        let keys: Vec<CountKey> = state
            .held
            .keys()
            .filter(|k| before.is_none_or(|b| k.2 < b))
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| state.held.remove(&k).map(|n| (k, n)))
            .collect()
    }

    /// Gives back counts whose write failed (the next flush tries again).
    pub(super) fn put_back(&self, counts: Vec<(CountKey, u64)>) {
        let mut state = self.lock();
        for (k, n) in counts {
            *state.held.entry(k).or_insert(0) += n;
        }
    }
}
