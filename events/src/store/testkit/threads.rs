//! How many tests of a suite binary run at once, set from inside the binary.
//!
//! libtest runs one test per core by default (2 on the CI machine). The store-backed suites
//! spend most of their time waiting on Postgres, on spawned processes or on short timers, so
//! at that default both cores sit mostly idle; cargo has no per-binary setting, and a
//! workspace-wide `RUST_TEST_THREADS` would also raise the CPU-bound suites' counts (domain's).
//! [`suite_test_threads!`](crate::suite_test_threads) puts an ELF initialiser into the test
//! binary that sets `RUST_TEST_THREADS` before `main` runs (while the process has one thread,
//! so the environment write races nothing), unless the caller already set it or passed
//! `--test-threads` (which libtest reads over the variable).

/// Makes the test binary that invokes it run `$n` tests at once unless `RUST_TEST_THREADS` is
/// already set. Invoke once, at the root of a `tests/suite.rs`.
#[macro_export]
macro_rules! suite_test_threads {
    ($n:literal) => {
        #[cfg(target_os = "linux")]
        #[used]
        #[link_section = ".init_array"]
        static SET_SUITE_TEST_THREADS: extern "C" fn() = {
            extern "C" fn set_suite_test_threads() {
                if ::std::env::var_os("RUST_TEST_THREADS").is_none() {
                    ::std::env::set_var("RUST_TEST_THREADS", $n);
                }
            }
            set_suite_test_threads
        };
    };
}
