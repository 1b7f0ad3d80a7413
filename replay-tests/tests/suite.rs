//! The replay tests and the house rules, compiled into one test binary. Run one file's tests with
//! `cargo test -p replay-tests --test suite <file>::`.

// Four tests at once: this suite mostly waits on Postgres, processes and timers (at the default
// of one per core it took about twice as long on the CI machine; decision 0093).
events::suite_test_threads!("4");

mod attestor_docs;
mod house_rules;
mod identity_replay;
mod operator_replay;
mod sqlite_disk_full;
mod ssh_replay;
