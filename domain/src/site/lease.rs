//! A site's boot lease `site:<id>:boot` (stream `lease/site:<id>:boot`): one site agent holds it
//! at a time, until `expires_at` unless it renews. ACQUIRE by the live holder renews it (same
//! epoch); by anyone when it is free, lapsed or released it starts a new holding at the last
//! epoch + 1 (`site.lease.acquired`, so a lapse raises the epoch even for the same holder); by
//! anyone else while it is held live it changes nothing (`held = false`). RENEW at the live
//! holding's epoch extends it; at a stale epoch or after a lapse it changes nothing (`held =
//! false`: the agent then ACQUIREs). RELEASE by the live holder at its epoch ends the holding
//! (`cause = "released"`); an operator's fence ends whatever live holding there is (`cause =
//! "fenced"`). Whether the caller is a site agent of the site is the shell's check.

use events::schema::{site_boot_lease, SiteLeaseAcquired, SiteLeaseReleased, SiteLeaseRenewed};

use super::SiteRefusal;
use crate::attest::SiteLeaseState;
use crate::identity::{Decision, IdentityEvent};

/// The lease's life when the configuration names none: 60 s (µs).
pub const DEFAULT_BOOT_LEASE_TTL_US: i64 = 60 * 1_000_000;

/// A site's boot lease as its stream leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootLease {
    /// The site.
    pub site_id: String,
    /// The node of the current (or last) holding.
    pub holder_node_id: String,
    /// The epoch of the current (or last) holding.
    pub epoch: u64,
    /// When that holding lapses (µs).
    pub expires_at_us: i64,
    /// The holding was released or fenced.
    pub released: bool,
}

impl BootLease {
    /// Whether someone holds the lease at `now_us`.
    pub fn live(&self, now_us: i64) -> bool {
        !self.released && now_us < self.expires_at_us
    }

    /// The lease as the discovery attestor reads it (no holder once released).
    pub fn as_fact(&self) -> SiteLeaseState {
        SiteLeaseState {
            site_id: self.site_id.clone(),
            holder_node_id: (!self.released).then(|| self.holder_node_id.clone()),
            epoch: self.epoch,
            expires_at_us: self.expires_at_us,
        }
    }
}

/// What a caller asks of the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseCommand {
    /// Take it, or renew it when the caller holds it live.
    Acquire,
    /// Extend the caller's live holding at this epoch.
    Renew {
        /// The epoch the caller believes it holds.
        epoch: u64,
    },
    /// Give up the caller's live holding at this epoch.
    Release {
        /// The epoch the caller believes it holds.
        epoch: u64,
    },
    /// An operator ends the live holding, whoever holds it (the caller is the actor).
    Fence,
}

/// What the caller is told: the lease after the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOutcome {
    /// Whether the caller holds it now.
    pub held: bool,
    /// The lease's current (or last) epoch; 0 when never held.
    pub epoch: u64,
    /// When the live holding lapses (0: nobody holds it).
    pub expires_at_us: i64,
    /// The live holder (`None`: free).
    pub holder_node_id: Option<String>,
}

fn outcome_of(lease: Option<&BootLease>, caller: &str, now_us: i64) -> LeaseOutcome {
    match lease {
        Some(l) if l.live(now_us) => LeaseOutcome {
            held: l.holder_node_id == caller,
            epoch: l.epoch,
            expires_at_us: l.expires_at_us,
            holder_node_id: Some(l.holder_node_id.clone()),
        },
        Some(l) => LeaseOutcome {
            held: false,
            epoch: l.epoch,
            expires_at_us: 0,
            holder_node_id: None,
        },
        None => LeaseOutcome {
            held: false,
            epoch: 0,
            expires_at_us: 0,
            holder_node_id: None,
        },
    }
}

/// Decides `cmd` by `caller` (a site agent's node id, or for [`LeaseCommand::Fence`] the
/// operator) on the boot lease of `site_id` (`lease`: its state, `None` if never held), at
/// `now_us`, with holdings lasting `ttl_us`. The events are empty when nothing changes; the
/// outcome is the lease as it then stands.
pub fn decide_lease(
    cmd: LeaseCommand,
    site_id: &str,
    caller: &str,
    lease: Option<&BootLease>,
    now_us: i64,
    ttl_us: i64,
) -> Result<Decision<LeaseOutcome>, SiteRefusal> {
    if ttl_us <= 0 {
        return Err(SiteRefusal::Invalid(
            "the boot lease TTL must be positive".into(),
        ));
    }
    if caller.is_empty() {
        return Err(SiteRefusal::Invalid("the caller is empty".into()));
    }
    let expires = now_us.saturating_add(ttl_us);
    let live = lease.filter(|l| l.live(now_us));
    let mine = live.filter(|l| l.holder_node_id == caller);
    let renewed = |l: &BootLease| {
        IdentityEvent::SiteLeaseRenewed(SiteLeaseRenewed {
            site_id: site_id.into(),
            holder_node_id: caller.into(),
            epoch: l.epoch,
            expires_at_us: expires,
        })
    };
    let events = match cmd {
        LeaseCommand::Acquire => match (mine, live) {
            (Some(l), _) => vec![renewed(l)],
            (None, Some(_)) => Vec::new(),
            (None, None) => vec![IdentityEvent::SiteLeaseAcquired(SiteLeaseAcquired {
                site_id: site_id.into(),
                lease: site_boot_lease(site_id),
                holder_node_id: caller.into(),
                epoch: lease.map_or(0, |l| l.epoch) + 1,
                expires_at_us: expires,
                previous_holder_node_id: lease
                    .map(|l| l.holder_node_id.clone())
                    .unwrap_or_default(),
                previous_epoch: lease.map_or(0, |l| l.epoch),
                previous_expires_at_us: lease.map_or(0, |l| l.expires_at_us),
                previous_lapsed: lease.is_some_and(|l| !l.released),
            })],
        },
        LeaseCommand::Renew { epoch } => match mine {
            Some(l) if l.epoch == epoch => vec![renewed(l)],
            _ => Vec::new(),
        },
        LeaseCommand::Release { epoch } => match mine {
            Some(l) if l.epoch == epoch => {
                vec![IdentityEvent::SiteLeaseReleased(SiteLeaseReleased {
                    site_id: site_id.into(),
                    holder_node_id: caller.into(),
                    epoch,
                    cause: "released".into(),
                    actor: caller.into(),
                })]
            }
            _ => Vec::new(),
        },
        LeaseCommand::Fence => {
            let l = live.ok_or_else(|| SiteRefusal::LeaseNotHeld(site_id.into()))?;
            vec![IdentityEvent::SiteLeaseReleased(SiteLeaseReleased {
                site_id: site_id.into(),
                holder_node_id: l.holder_node_id.clone(),
                epoch: l.epoch,
                cause: "fenced".into(),
                actor: caller.into(),
            })]
        }
    };
    let after = events.iter().fold(lease.cloned(), evolve_lease);
    let mut outcome = outcome_of(after.as_ref(), caller, now_us);
    // A renew that renewed nothing (a stale epoch, a lapse) is not held, even when the caller
    // holds another epoch: it then ACQUIREs. A fence is nobody's holding.
    if cmd == LeaseCommand::Fence
        || (matches!(cmd, LeaseCommand::Renew { .. }) && events.is_empty())
    {
        outcome.held = false;
    }
    Ok(Decision { events, outcome })
}

/// Applies an event to a site's boot lease (`None` before its first `site.lease.acquired`).
pub fn evolve_lease(state: Option<BootLease>, event: &IdentityEvent) -> Option<BootLease> {
    match (state, event) {
        (_, IdentityEvent::SiteLeaseAcquired(e)) => Some(BootLease {
            site_id: e.site_id.clone(),
            holder_node_id: e.holder_node_id.clone(),
            epoch: e.epoch,
            expires_at_us: e.expires_at_us,
            released: false,
        }),
        (Some(mut s), IdentityEvent::SiteLeaseRenewed(e)) => {
            s.expires_at_us = e.expires_at_us;
            Some(s)
        }
        (Some(mut s), IdentityEvent::SiteLeaseReleased(_)) => {
            s.released = true;
            Some(s)
        }
        (s, _) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000_000;
    const TTL: i64 = 3_000_000;

    /// Runs `cmd` and folds its events into `lease`.
    fn run(
        lease: &mut Option<BootLease>,
        cmd: LeaseCommand,
        caller: &str,
        now: i64,
    ) -> (Vec<IdentityEvent>, LeaseOutcome) {
        let d = decide_lease(cmd, "par1", caller, lease.as_ref(), now, TTL).expect("decided");
        for e in &d.events {
            assert_eq!(e.stream(), "lease/site:par1:boot");
            *lease = evolve_lease(lease.take(), e);
        }
        (d.events, d.outcome)
    }

    fn kinds(events: &[IdentityEvent]) -> Vec<&'static str> {
        events
            .iter()
            .map(|e| match e {
                IdentityEvent::SiteLeaseAcquired(_) => "acquired",
                IdentityEvent::SiteLeaseRenewed(_) => "renewed",
                IdentityEvent::SiteLeaseReleased(_) => "released",
                _ => "other",
            })
            .collect()
    }

    #[test]
    fn the_first_acquire_takes_epoch_1_and_acquire_by_the_holder_renews_it() {
        let mut lease = None;
        let (events, out) = run(&mut lease, LeaseCommand::Acquire, "a", T0);
        assert_eq!(kinds(&events), ["acquired"]);
        let IdentityEvent::SiteLeaseAcquired(e) = &events[0] else {
            panic!()
        };
        assert_eq!(
            (e.lease.as_str(), e.previous_holder_node_id.as_str()),
            ("site:par1:boot", "")
        );
        assert!(!e.previous_lapsed);
        assert_eq!(
            out,
            LeaseOutcome {
                held: true,
                epoch: 1,
                expires_at_us: T0 + TTL,
                holder_node_id: Some("a".into()),
            }
        );
        let (events, out) = run(&mut lease, LeaseCommand::Acquire, "a", T0 + 1_000_000);
        assert_eq!(kinds(&events), ["renewed"]);
        assert_eq!(
            (out.held, out.epoch, out.expires_at_us),
            (true, 1, T0 + 1_000_000 + TTL)
        );
    }

    #[test]
    fn another_agent_cannot_take_a_live_lease_and_takes_epoch_plus_1_after_a_lapse() {
        let mut lease = None;
        run(&mut lease, LeaseCommand::Acquire, "a", T0);
        let (events, out) = run(&mut lease, LeaseCommand::Acquire, "b", T0 + 1);
        assert!(events.is_empty());
        assert_eq!(
            (out.held, out.epoch, out.holder_node_id.as_deref()),
            (false, 1, Some("a"))
        );
        let (events, out) = run(&mut lease, LeaseCommand::Acquire, "b", T0 + TTL);
        let IdentityEvent::SiteLeaseAcquired(e) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(
            (e.previous_holder_node_id.as_str(), e.previous_epoch),
            ("a", 1)
        );
        assert_eq!(e.previous_expires_at_us, T0 + TTL);
        assert!(e.previous_lapsed);
        assert_eq!((out.held, out.epoch), (true, 2));
        // The old holder's renew at its epoch is not held; its fresh acquire is refused while
        // b holds it.
        let (events, out) = run(
            &mut lease,
            LeaseCommand::Renew { epoch: 1 },
            "a",
            T0 + TTL + 1,
        );
        assert!(events.is_empty());
        assert_eq!(
            (out.held, out.epoch, out.holder_node_id.as_deref()),
            (false, 2, Some("b"))
        );
    }

    #[test]
    fn the_same_holder_after_a_lapse_gets_a_new_epoch() {
        let mut lease = None;
        run(&mut lease, LeaseCommand::Acquire, "a", T0);
        let (events, out) = run(&mut lease, LeaseCommand::Acquire, "a", T0 + TTL + 5);
        assert_eq!(kinds(&events), ["acquired"]);
        assert_eq!((out.held, out.epoch), (true, 2));
    }

    #[test]
    fn renew_keeps_the_epoch_and_is_not_held_at_a_stale_epoch_or_after_a_lapse() {
        let mut lease = None;
        run(&mut lease, LeaseCommand::Acquire, "a", T0);
        let (events, out) = run(
            &mut lease,
            LeaseCommand::Renew { epoch: 1 },
            "a",
            T0 + 2_000_000,
        );
        assert_eq!(kinds(&events), ["renewed"]);
        assert_eq!(
            (out.held, out.epoch, out.expires_at_us),
            (true, 1, T0 + 2_000_000 + TTL)
        );
        let (events, out) = run(
            &mut lease,
            LeaseCommand::Renew { epoch: 7 },
            "a",
            T0 + 2_000_001,
        );
        assert!(events.is_empty());
        assert!(!out.held);
        let lapse = T0 + 2_000_000 + TTL;
        let (events, out) = run(&mut lease, LeaseCommand::Renew { epoch: 1 }, "a", lapse);
        assert!(events.is_empty());
        assert_eq!(
            out,
            LeaseOutcome {
                held: false,
                epoch: 1,
                expires_at_us: 0,
                holder_node_id: None,
            }
        );
        // Never held: not held, epoch 0.
        let mut none = None;
        let (events, out) = run(&mut none, LeaseCommand::Renew { epoch: 0 }, "a", T0);
        assert!(events.is_empty());
        assert_eq!((out.held, out.epoch), (false, 0));
    }

    #[test]
    fn release_then_acquire_by_another_is_epoch_plus_1() {
        let mut lease = None;
        run(&mut lease, LeaseCommand::Acquire, "a", T0);
        // Only the holder at its epoch releases.
        let (events, _) = run(&mut lease, LeaseCommand::Release { epoch: 1 }, "b", T0 + 1);
        assert!(events.is_empty());
        let (events, _) = run(&mut lease, LeaseCommand::Release { epoch: 2 }, "a", T0 + 1);
        assert!(events.is_empty());
        let (events, out) = run(&mut lease, LeaseCommand::Release { epoch: 1 }, "a", T0 + 2);
        let IdentityEvent::SiteLeaseReleased(e) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(
            (e.cause.as_str(), e.actor.as_str(), e.epoch),
            ("released", "a", 1)
        );
        assert_eq!((out.held, out.epoch, out.holder_node_id), (false, 1, None));
        assert_eq!(
            lease
                .as_ref()
                .map(BootLease::as_fact)
                .and_then(|f| f.holder_node_id),
            None
        );
        let (events, out) = run(&mut lease, LeaseCommand::Acquire, "b", T0 + 3);
        let IdentityEvent::SiteLeaseAcquired(e) = &events[0] else {
            panic!("{events:?}")
        };
        assert!(!e.previous_lapsed);
        assert_eq!((out.held, out.epoch), (true, 2));
        // A second release of the released epoch changes nothing.
        let (events, _) = run(&mut lease, LeaseCommand::Release { epoch: 1 }, "a", T0 + 4);
        assert!(events.is_empty());
    }

    #[test]
    fn fence_ends_the_live_holding_and_refuses_a_free_lease() {
        let mut lease = None;
        assert_eq!(
            decide_lease(LeaseCommand::Fence, "par1", "alice", None, T0, TTL)
                .err()
                .map(|e| e.to_string()),
            Some("INVALID_STATE: the boot lease of site par1 is not held".into())
        );
        run(&mut lease, LeaseCommand::Acquire, "a", T0);
        let (events, out) = run(&mut lease, LeaseCommand::Fence, "alice", T0 + 1);
        let IdentityEvent::SiteLeaseReleased(e) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(
            (
                e.cause.as_str(),
                e.actor.as_str(),
                e.holder_node_id.as_str(),
                e.epoch
            ),
            ("fenced", "alice", "a", 1)
        );
        assert!(!out.held);
        // The fenced agent's renew is not held; its acquire starts epoch 2.
        let (events, out) = run(&mut lease, LeaseCommand::Renew { epoch: 1 }, "a", T0 + 2);
        assert!(events.is_empty() && !out.held);
        let (_, out) = run(&mut lease, LeaseCommand::Acquire, "a", T0 + 3);
        assert_eq!((out.held, out.epoch), (true, 2));
        let lapsed = T0 + 3 + TTL;
        assert!(decide_lease(
            LeaseCommand::Fence,
            "par1",
            "alice",
            lease.as_ref(),
            lapsed,
            TTL
        )
        .is_err());
    }

    #[test]
    fn a_bad_ttl_or_an_empty_caller_is_refused() {
        assert!(decide_lease(LeaseCommand::Acquire, "par1", "a", None, T0, 0).is_err());
        assert!(decide_lease(LeaseCommand::Acquire, "par1", "", None, T0, TTL).is_err());
    }

    #[test]
    fn held_by_of_the_fact_matches_the_lease() {
        let mut lease = None;
        run(&mut lease, LeaseCommand::Acquire, "a", T0);
        let fact = lease.as_ref().map(BootLease::as_fact).expect("lease");
        assert!(fact.held_by("a", 1, T0 + 1));
        assert!(!fact.held_by("a", 2, T0 + 1));
        assert!(!fact.held_by("a", 1, T0 + TTL));
    }
}
