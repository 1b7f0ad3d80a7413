//! The log store's integration tests, compiled into one test binary instead of one per file.
//! Each `tests/*.rs` file is a module here, except two that stay binaries of their own (see
//! `Cargo.toml`): `bounded_memory` installs a counting global allocator, which the other tests'
//! allocations would disturb, and `testkit_sweep` drops stale test databases, which would race
//! the sweep every process makes when it creates its first test database. Run one file's tests
//! with `cargo test -p events --test suite <file>::`.

// Four tests at once: this suite mostly waits on Postgres, processes and timers (at the default
// of one per core it took about twice as long on the CI machine; decision 0093).
events::suite_test_threads!("4");

mod actor;
mod cancel_safety;
mod conformance;
mod hub;
mod leader;
mod postgres_races;
mod store_open_errors;
