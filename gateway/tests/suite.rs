//! The gateway's integration tests, compiled into one test binary instead of one per file. Each
//! `tests/*.rs` file is a module here; `common` is declared once for all. Run one file's tests
//! with `cargo test -p gateway --test suite <file>::`.

// Four tests at once: this suite mostly waits on Postgres, processes and timers (at the default
// of one per core it took about twice as long on the CI machine; decision 0093).
events::suite_test_threads!("4");

mod common;

mod api_probe;
mod commands_fake_queue;
mod commands_session;
mod edge;
mod feed_faults;
mod handshake;
mod internal;
mod join_replay_wire;
mod renew_edge_refusals;
mod renew_signed;
mod runtime_reports;
mod serve;
mod serving_grant;
mod serving_renewal;
mod session_hardening;
mod session_wire;
mod site_agent_wire;
