//! The replay tests and the house rules, compiled into one test binary. Run one file's tests with
//! `cargo test -p replay-tests --test suite <file>::`.

mod attestor_docs;
mod house_rules;
mod identity_replay;
mod operator_replay;
mod sqlite_disk_full;
