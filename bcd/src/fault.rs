//! Fault points for the crash tests: named places in the join (and in every durable write) where
//! a test can stop the real `bcd` process and SIGKILL it, to show the next `bcd join` completes
//! or says what to do and the files never mix two identities.
//!
//! Only debug builds have them (`cfg(debug_assertions)`, which the test profile has and the
//! release profile does not): in a release build [`point`] is empty. In a debug build, with
//! `BCD_TEST_CRASH_AT=<name>` in the environment, the process reaching the point named `<name>`
//! prints `bcd: fault point <name>: stopped` on standard error and stops itself with SIGSTOP; the
//! test sees it stopped (`/proc/<pid>/stat`) and kills it with SIGKILL. Stopping rather than
//! exiting means no destructor, no buffered write and no cleanup runs: what is on disk is what a
//! kill at that instant leaves.
//!
//! The points, in the order a join reaches them:
//!
//! | point | where |
//! | --- | --- |
//! | `join:prepared` | key and CSR made, token sealed, the request kept in `join.pending`; nothing sent |
//! | `join:answer-received` | the control plane answered (it committed the join); nothing verified or written |
//! | `join:verified` | the answer verified; nothing written |
//! | `store:next-removed` | a stale `node.key.next` removed |
//! | `write:<file>:tmp-synced` | `.<file>.tmp-<pid>` written and fsynced, not yet renamed |
//! | `write:<file>:renamed` | renamed over `<file>`, the directory not yet fsynced |
//! | `join:stored` | the identity stored; the token file not yet deleted |
//! | `reset:moved:<file>` | `bcd join --reset --yes` renamed `<file>` aside |

/// The environment variable naming the point to stop at (debug builds only).
pub const CRASH_AT_ENV: &str = "BCD_TEST_CRASH_AT";

/// A fault point (see the module doc); nothing in a release build.
#[inline]
pub fn point(name: &str) {
    #[cfg(debug_assertions)]
    stop_if_named(name);
    #[cfg(not(debug_assertions))]
    let _ = name;
}

#[cfg(debug_assertions)]
fn stop_if_named(name: &str) {
    if std::env::var_os(CRASH_AT_ENV).is_some_and(|at| at == name) {
        eprintln!("bcd: fault point {name}: stopped");
        // SAFETY: raise(3) with a valid signal number has no memory-safety preconditions.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }
}
