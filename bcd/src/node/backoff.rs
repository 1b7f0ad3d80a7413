//! [`Backoff`], how long `bcd node` waits before it reconnects after a lost session (issue 44
//! item 8, `docs/DECISIONS.md` "Issue 44: bcd's reconnect backoff resets after a lasting
//! session, with decorrelated jitter").
//!
//! * **Jitter, decorrelated**: each wait is drawn uniformly from `[RECONNECT_MIN, 3 × the
//!   previous wait)`, never above [`RECONNECT_MAX`]; the first wait of a streak of failures is
//!   drawn from `[1 s, 3 s)`. A gateway restart that ends every session at once therefore brings
//!   its nodes back over about two seconds rather than within one, and each failed attempt
//!   (the gateway still down) spreads them further: the nodes that tried early draw again from
//!   a window three times as wide as their last wait.
//! * **Growth while failing**: the window's top grows threefold per failure, so a node that
//!   keeps failing settles at waits between 1 s and 30 s (the cap), and a fleet that keeps
//!   failing reconnects at most about once every 15 s per node on average.
//! * **Reset after a lasting session**: a session the gateway welcomed and that stayed open at
//!   least [`LASTING_SESSION`] after its `Welcome` ends the streak: the next loss starts again
//!   from `[1 s, 3 s)`. Before issue 44 only a session closed for a renewal reset it, so a node
//!   that had lost a few sessions over its life waited up to 30 s after a planned gateway
//!   restart, where a fresh node waited 1 s. A session that never got its `Welcome`, or lost it
//!   within 10 s (a gateway that accepts and then drops sessions), keeps the streak: such a
//!   gateway is not hammered once a second by every node.
//!
//! The type is pure: the random draws come from its own small generator ([`SplitMix64`]),
//! seeded from the process's entropy in `bcd node` and from a fixed seed in the tests, which
//! assert exact waits.

use std::time::Duration;

/// The shortest wait before a reconnection, and the bottom of every draw.
pub const RECONNECT_MIN: Duration = Duration::from_secs(1);
/// The longest wait before a reconnection (a gateway's retry hint may ask for longer:
/// [`crate::node::PUSHBACK_MAX`]).
pub const RECONNECT_MAX: Duration = Duration::from_secs(30);
/// How long a session must stay open after its `Welcome` to end a streak of failures.
pub const LASTING_SESSION: Duration = Duration::from_secs(10);
/// How much wider than the previous wait the next draw's window reaches.
const GROWTH: u32 = 3;

/// A small seeded generator (SplitMix64): the jitter needs no cryptographic quality, only
/// draws that differ between nodes and can be replayed in a test.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn seeded(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// A generator seeded from the process's random hash keys and the time: different on
    /// every node and every start.
    pub fn from_entropy() -> SplitMix64 {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        hasher.write_u32(std::process::id());
        SplitMix64(hasher.finish())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A fraction in `[0, 1)`.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The reconnect policy of one loop: its streak of failures and the last wait drawn.
#[derive(Debug, Clone)]
pub struct Backoff {
    rng: SplitMix64,
    /// The last wait of the current streak (`None`: no failure since the last reset).
    last: Option<Duration>,
    failures: u32,
}

impl Backoff {
    /// A policy with no failure yet, drawing from `rng`.
    pub fn new(rng: SplitMix64) -> Backoff {
        Backoff {
            rng,
            last: None,
            failures: 0,
        }
    }

    /// The failures since the last reset.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Ends the streak: the next wait is drawn from `[1 s, 3 s)` again.
    pub fn reset(&mut self) {
        self.last = None;
        self.failures = 0;
    }

    /// A session ended; `held` is how long it stayed open after its `Welcome` (`None`: it was
    /// never welcomed). One that lasted [`LASTING_SESSION`] resets the streak.
    pub fn session_ended(&mut self, held: Option<Duration>) {
        if held.is_some_and(|held| held >= LASTING_SESSION) {
            self.reset();
        }
    }

    /// The window the next wait is drawn from: `[RECONNECT_MIN, top)`.
    pub fn window(&self) -> (Duration, Duration) {
        let previous = self.last.unwrap_or(RECONNECT_MIN);
        let top = previous.saturating_mul(GROWTH).min(RECONNECT_MAX);
        (RECONNECT_MIN, top.max(RECONNECT_MIN))
    }

    /// A failure (a lost session, a refused connection): the wait before the next attempt,
    /// drawn uniformly from [`Backoff::window`], in whole milliseconds.
    pub fn next_delay(&mut self) -> Duration {
        let (low, high) = self.window();
        let span = (high - low).as_millis() as f64;
        let drawn = low + Duration::from_millis((span * self.rng.next_unit()) as u64);
        let wait = drawn.clamp(RECONNECT_MIN, RECONNECT_MAX);
        self.last = Some(wait);
        self.failures = self.failures.saturating_add(1);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    fn waits(backoff: &mut Backoff, n: usize) -> Vec<u128> {
        (0..n).map(|_| ms(backoff.next_delay())).collect()
    }

    #[test]
    fn the_generator_replays_from_its_seed() {
        let mut a = SplitMix64::seeded(44);
        let mut b = SplitMix64::seeded(44);
        let drawn: Vec<u64> = (0..3).map(|_| a.next_u64()).collect();
        assert_eq!(drawn, (0..3).map(|_| b.next_u64()).collect::<Vec<_>>());
        // SplitMix64's published first output for seed 0.
        assert_eq!(SplitMix64::seeded(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let unit = SplitMix64::seeded(7).next_unit();
        assert!((0.0..1.0).contains(&unit), "{unit}");
    }

    #[test]
    fn waits_grow_while_failing_within_a_window_three_times_the_last_wait() {
        let mut backoff = Backoff::new(SplitMix64::seeded(8));
        assert_eq!(backoff.window(), (RECONNECT_MIN, Duration::from_secs(3)));
        let seen = waits(&mut backoff, 8);
        assert_eq!(seen, EXPECTED_SEED_8);
        assert_eq!(backoff.failures(), 8);
        // Each wait lies in [1 s, 3 × the previous wait), the first in [1 s, 3 s).
        let mut previous = 1000;
        for &wait in &seen {
            assert!(
                wait >= 1000 && wait < (3 * previous).clamp(1001, 30_000),
                "{seen:?}"
            );
            previous = wait;
        }
        // Over many nodes the n-th wait of a streak grows: mean of 200 seeds, attempts 1 to 4.
        let mean = |attempt: usize| {
            let total: u128 = (0..200)
                .map(|seed| {
                    waits(&mut Backoff::new(SplitMix64::seeded(seed)), attempt)[attempt - 1]
                })
                .sum();
            total / 200
        };
        let means: Vec<u128> = (1..=4).map(mean).collect();
        assert!(means.windows(2).all(|w| w[0] < w[1]), "{means:?}");
    }

    #[test]
    fn the_wait_never_passes_the_cap_however_long_it_fails() {
        for seed in 0..50 {
            let mut backoff = Backoff::new(SplitMix64::seeded(seed));
            for _ in 0..60 {
                let wait = backoff.next_delay();
                assert!((RECONNECT_MIN..=RECONNECT_MAX).contains(&wait), "{wait:?}");
            }
            let (low, high) = backoff.window();
            assert_eq!(low, RECONNECT_MIN);
            assert!(high <= RECONNECT_MAX);
        }
        // A streak long enough reaches the cap's window exactly.
        let mut backoff = Backoff::new(SplitMix64::seeded(3));
        backoff.last = Some(Duration::from_secs(20));
        assert_eq!(backoff.window(), (RECONNECT_MIN, RECONNECT_MAX));
    }

    #[test]
    fn a_lasting_session_resets_the_streak_and_a_short_or_unwelcomed_one_does_not() {
        let mut backoff = Backoff::new(SplitMix64::seeded(8));
        waits(&mut backoff, 5);
        let grown = backoff.window();
        // Never welcomed, or welcomed and lost within 10 s: the streak goes on.
        backoff.session_ended(None);
        backoff.session_ended(Some(LASTING_SESSION - Duration::from_millis(1)));
        assert_eq!(backoff.failures(), 5);
        assert_eq!(backoff.window(), grown);
        // Open 10 s after its Welcome: the next wait is drawn from [1 s, 3 s) again.
        backoff.session_ended(Some(LASTING_SESSION));
        assert_eq!(backoff.failures(), 0);
        assert_eq!(backoff.window(), (RECONNECT_MIN, Duration::from_secs(3)));
        let after = ms(backoff.next_delay());
        assert_eq!(after, EXPECTED_SEED_8_AFTER_RESET);
    }

    #[test]
    fn first_waits_spread_over_two_seconds_across_nodes() {
        // 200 nodes losing their session at once: their first waits, one seed each.
        let mut first: Vec<u128> = (0..200)
            .map(|seed| ms(Backoff::new(SplitMix64::seeded(seed)).next_delay()))
            .collect();
        first.sort_unstable();
        assert!(first[0] >= 1000 && first[199] < 3000, "{first:?}");
        // No second holds more than about half of them (uniform: 100 a second).
        for start in (1000..3000).step_by(100) {
            let in_second = first
                .iter()
                .filter(|&&w| w >= start && w < start + 1000)
                .count();
            assert!(in_second <= 125, "{in_second} in [{start}, +1 s)");
        }
        assert_eq!(first[..3], EXPECTED_FIRST_LOWEST);
    }

    // The exact draws of the seeds above (SplitMix64 is fixed, so these never move).
    const EXPECTED_SEED_8: [u128; 8] = [2237, 4494, 9600, 15903, 2850, 3830, 11008, 11350];
    const EXPECTED_SEED_8_AFTER_RESET: u128 = 1749;
    const EXPECTED_FIRST_LOWEST: [u128; 3] = [1008, 1022, 1023];
}
