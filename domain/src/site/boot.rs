//! Boot entries (`bcctl site boot add | remove`): a machine an operator registered for
//! commissioning at a site, by MAC (normalized with [`normalize_mac`]), with the kernel and
//! initrd its iPXE script boots (http or https URLs), extra kernel arguments, the pool it joins
//! (the entry's, else the site's default) and an end (`not_after`, 24 hours by default, at most
//! 30 days). A site has at most one active entry (not removed, not past its end) per MAC: adding
//! another refuses unless `replace`, which removes the old one in the same append.

use events::schema::{BootEntryAdded, BootEntryRemoved};

use super::sites::SiteState;
use super::{check_actor, check_id, check_text, SiteRefusal, MAX_SITE_TEXT};
use crate::attest::discovery::wire::normalize_mac;
use crate::attest::BootEntryState;
use crate::identity::{Decision, IdentityEvent};

/// The prefix of a boot entry's id.
pub const BOOT_ENTRY_ID_PREFIX: &str = "boot_";

/// An entry's life when the operator names none: 24 hours (µs).
pub const BOOT_ENTRY_DEFAULT_TTL_US: i64 = 24 * 3600 * 1_000_000;

/// The longest life of an entry: 30 days (µs).
pub const BOOT_ENTRY_MAX_TTL_US: i64 = 30 * 24 * 3600 * 1_000_000;

/// At most this many bytes of a kernel or initrd URL.
const MAX_URL: usize = 2048;

/// `site boot add`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddBootEntry {
    /// The new entry's id (`boot_…`, minted by the shell).
    pub entry_id: String,
    /// The site.
    pub site_id: String,
    /// The MAC as the operator typed it (any case, ':' or '-').
    pub mac: String,
    /// The machine's product UUID, when the operator knows it.
    pub product_uuid: Option<String>,
    /// The kernel the script boots (http or https).
    pub kernel_url: String,
    /// Its initrd (http or https).
    pub initrd_url: String,
    /// Extra kernel arguments (never `bc.token=` or `bc.assertion=`).
    pub kernel_args: String,
    /// The pool the machine joins (`None`: the site's default pool).
    pub pool_id: Option<String>,
    /// How long the entry serves scripts (`None`: 24 hours), µs.
    pub expires_in_us: Option<i64>,
    /// Replace the MAC's active entry instead of refusing.
    pub replace: bool,
    /// Who adds it.
    pub actor: String,
}

fn check_url(what: &str, url: &str) -> Result<(), SiteRefusal> {
    let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
    let rest = url.split_once("://").map_or("", |(_, r)| r);
    if !scheme_ok
        || rest.is_empty()
        || url.len() > MAX_URL
        || url.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(SiteRefusal::Invalid(format!(
            "the {what} URL {url:?} must be an http:// or https:// URL of at most {MAX_URL} \
             bytes without spaces"
        )));
    }
    Ok(())
}

fn check_kernel_args(args: &str) -> Result<(), SiteRefusal> {
    check_text("kernel arguments", args, MAX_SITE_TEXT)?;
    if args
        .split_whitespace()
        .any(|a| a.starts_with("bc.token=") || a.starts_with("bc.assertion="))
    {
        return Err(SiteRefusal::Invalid(
            "the kernel arguments may not carry bc.token= or bc.assertion= (the boot server \
             adds them)"
                .into(),
        ));
    }
    Ok(())
}

/// A product UUID in its canonical form: 8-4-4-4-12 hex digits, lower-cased.
fn normalize_product_uuid(text: &str) -> Result<String, SiteRefusal> {
    let lower = text.trim().to_ascii_lowercase();
    let groups: Vec<&str> = lower.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let ok = lengths == [8, 4, 4, 4, 12]
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    if ok {
        Ok(lower)
    } else {
        Err(SiteRefusal::Invalid(format!(
            "the product UUID {text:?} must be 8-4-4-4-12 hex digits"
        )))
    }
}

/// The entry of `entries` that is active for `mac` at `now_us`: not removed, not past its end.
pub fn active_entry_for_mac<'a>(
    entries: &'a [BootEntryState],
    mac: &str,
    now_us: i64,
) -> Option<&'a BootEntryState> {
    entries
        .iter()
        .find(|e| e.mac == mac && !e.removed && now_us < e.not_after_us)
}

/// Adds a boot entry to `site` (`None`: no such site); `entries` are the site's entries.
pub fn decide_add_boot_entry(
    cmd: &AddBootEntry,
    site: Option<&SiteState>,
    entries: &[BootEntryState],
    now_us: i64,
) -> Result<Decision<()>, SiteRefusal> {
    check_id("entry id", &cmd.entry_id)?;
    if !cmd.entry_id.starts_with(BOOT_ENTRY_ID_PREFIX) {
        return Err(SiteRefusal::Invalid(format!(
            "entry id {:?} must start with {BOOT_ENTRY_ID_PREFIX}",
            cmd.entry_id
        )));
    }
    let mac = normalize_mac(&cmd.mac).ok_or_else(|| {
        SiteRefusal::Invalid(format!(
            "the MAC {:?} must be six hex pairs separated by ':' or '-'",
            cmd.mac
        ))
    })?;
    let product_uuid = cmd
        .product_uuid
        .as_deref()
        .map(normalize_product_uuid)
        .transpose()?;
    check_url("kernel", &cmd.kernel_url)?;
    check_url("initrd", &cmd.initrd_url)?;
    check_kernel_args(&cmd.kernel_args)?;
    if let Some(pool) = &cmd.pool_id {
        check_id("pool id", pool)?;
    }
    let ttl = cmd.expires_in_us.unwrap_or(BOOT_ENTRY_DEFAULT_TTL_US);
    if ttl <= 0 || ttl > BOOT_ENTRY_MAX_TTL_US {
        return Err(SiteRefusal::Invalid(format!(
            "the entry's life must be more than 0 and at most 30 days (720h), got {}s",
            ttl / 1_000_000
        )));
    }
    check_actor(&cmd.actor)?;
    let site = site.ok_or_else(|| SiteRefusal::UnknownSite(cmd.site_id.clone()))?;
    let pool_id = cmd
        .pool_id
        .clone()
        .or_else(|| site.default_pool_id.clone())
        .ok_or_else(|| {
            SiteRefusal::Invalid(format!(
                "site {} has no default pool: give --pool POOL",
                site.site_id
            ))
        })?;
    let mut events = Vec::new();
    if let Some(old) = active_entry_for_mac(entries, &mac, now_us) {
        if !cmd.replace {
            return Err(SiteRefusal::BootEntryExists {
                site: site.site_id.clone(),
                mac,
                entry_id: old.entry_id.clone(),
            });
        }
        events.push(IdentityEvent::BootEntryRemoved(BootEntryRemoved {
            entry_id: old.entry_id.clone(),
            site_id: site.site_id.clone(),
            actor: cmd.actor.clone(),
            reason: format!("replaced by {}", cmd.entry_id),
        }));
    }
    events.push(IdentityEvent::BootEntryAdded(BootEntryAdded {
        entry_id: cmd.entry_id.clone(),
        site_id: site.site_id.clone(),
        tenant_id: site.tenant_id.clone(),
        mac,
        product_uuid: product_uuid.unwrap_or_default(),
        kernel_url: cmd.kernel_url.clone(),
        initrd_url: cmd.initrd_url.clone(),
        kernel_args: cmd.kernel_args.clone(),
        pool_id,
        not_after_us: now_us.saturating_add(ttl),
        actor: cmd.actor.clone(),
    }));
    Ok(Decision::events_only(events))
}

/// Removes a boot entry (`None`: no such entry): its MAC boots no script from it any more.
pub fn decide_remove_boot_entry(
    entry_id: &str,
    entry: Option<&BootEntryState>,
    actor: &str,
    reason: &str,
) -> Result<Decision<()>, SiteRefusal> {
    check_actor(actor)?;
    check_text("reason", reason, MAX_SITE_TEXT)?;
    let entry = entry.ok_or_else(|| SiteRefusal::UnknownBootEntry(entry_id.into()))?;
    if entry.removed {
        return Err(SiteRefusal::BootEntryRemoved(entry.entry_id.clone()));
    }
    Ok(Decision::events_only(vec![
        IdentityEvent::BootEntryRemoved(BootEntryRemoved {
            entry_id: entry.entry_id.clone(),
            site_id: entry.site_id.clone(),
            actor: actor.into(),
            reason: reason.into(),
        }),
    ]))
}

/// Applies an event to a boot entry's state (`None` before its `site.boot.added`).
pub fn evolve_boot_entry(
    state: Option<BootEntryState>,
    event: &IdentityEvent,
) -> Option<BootEntryState> {
    match (state, event) {
        (None, IdentityEvent::BootEntryAdded(e)) => Some(BootEntryState {
            entry_id: e.entry_id.clone(),
            site_id: e.site_id.clone(),
            tenant_id: e.tenant_id.clone(),
            mac: e.mac.clone(),
            product_uuid: (!e.product_uuid.is_empty()).then(|| e.product_uuid.clone()),
            pool_id: e.pool_id.clone(),
            not_after_us: e.not_after_us,
            removed: false,
        }),
        (Some(mut s), IdentityEvent::BootEntryRemoved(e)) if e.entry_id == s.entry_id => {
            s.removed = true;
            Some(s)
        }
        (s, _) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000;

    fn site() -> SiteState {
        SiteState {
            site_id: "par1".into(),
            tenant_id: "acme".into(),
            description: String::new(),
            default_pool_id: Some("edge".into()),
        }
    }

    fn add() -> AddBootEntry {
        AddBootEntry {
            entry_id: "boot_1".into(),
            site_id: "par1".into(),
            mac: "AA-BB-CC-DD-EE-0F".into(),
            product_uuid: Some("4C4C4544-0000-1000-8000-000000000001".into()),
            kernel_url: "http://boot.example/vmlinuz".into(),
            initrd_url: "https://boot.example/initrd".into(),
            kernel_args: "console=ttyS0".into(),
            pool_id: None,
            expires_in_us: None,
            replace: false,
            actor: "alice".into(),
        }
    }

    fn refusal(r: Result<Decision<()>, SiteRefusal>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(d) => panic!("admitted: {:?}", d.events),
        }
    }

    fn added(cmd: &AddBootEntry, entries: &[BootEntryState]) -> Vec<IdentityEvent> {
        decide_add_boot_entry(cmd, Some(&site()), entries, NOW)
            .expect("added")
            .events
    }

    fn state_of(events: &[IdentityEvent]) -> BootEntryState {
        let added = events.last().expect("an event");
        evolve_boot_entry(None, added).expect("an entry")
    }

    #[test]
    fn add_normalizes_the_mac_and_uuid_takes_the_default_pool_and_lasts_24_hours() {
        let events = added(&add(), &[]);
        let [IdentityEvent::BootEntryAdded(e)] = events.as_slice() else {
            panic!("events {events:?}")
        };
        assert_eq!(e.mac, "aa:bb:cc:dd:ee:0f");
        assert_eq!(e.product_uuid, "4c4c4544-0000-1000-8000-000000000001");
        assert_eq!((e.pool_id.as_str(), e.tenant_id.as_str()), ("edge", "acme"));
        assert_eq!(e.not_after_us, NOW + BOOT_ENTRY_DEFAULT_TTL_US);
        assert_eq!(events[0].stream(), "site/par1");
        let mut own = add();
        own.pool_id = Some("lab".into());
        own.product_uuid = None;
        own.expires_in_us = Some(BOOT_ENTRY_MAX_TTL_US);
        let s = state_of(&added(&own, &[]));
        assert_eq!((s.pool_id.as_str(), s.product_uuid), ("lab", None));
        assert_eq!(s.not_after_us, NOW + BOOT_ENTRY_MAX_TTL_US);
    }

    #[test]
    fn add_refuses_each_bad_input() {
        let with = |f: fn(&mut AddBootEntry)| {
            let mut c = add();
            f(&mut c);
            refusal(decide_add_boot_entry(&c, Some(&site()), &[], NOW))
        };
        assert_eq!(
            with(|c| c.mac = "aa:bb:cc".into()),
            "INVALID_INPUT: the MAC \"aa:bb:cc\" must be six hex pairs separated by ':' or '-'"
        );
        assert!(with(|c| c.kernel_url = "ftp://x/k".into())
            .starts_with("INVALID_INPUT: the kernel URL"));
        assert!(
            with(|c| c.kernel_url = "http://".into()).starts_with("INVALID_INPUT: the kernel URL")
        );
        assert!(with(|c| c.initrd_url = "http://x/a b".into())
            .starts_with("INVALID_INPUT: the initrd URL"));
        assert!(with(|c| c.kernel_args = "quiet bc.token=abc".into()).contains("bc.token="));
        assert!(with(|c| c.kernel_args = "bc.assertion=x".into()).contains("bc.assertion="));
        assert!(with(|c| c.product_uuid = Some("nope".into())).contains("8-4-4-4-12"));
        assert!(with(|c| c.pool_id = Some("a b".into())).starts_with("INVALID_INPUT: pool id"));
        assert!(with(|c| c.expires_in_us = Some(0)).contains("at most 30 days"));
        assert!(
            with(|c| c.expires_in_us = Some(BOOT_ENTRY_MAX_TTL_US + 1)).contains("at most 30 days")
        );
        assert!(with(|c| c.entry_id = "x_1".into()).contains("must start with boot_"));
        assert_eq!(
            with(|c| c.actor = String::new()),
            "INVALID_INPUT: the actor is empty"
        );
        assert_eq!(
            refusal(decide_add_boot_entry(&add(), None, &[], NOW)),
            "NOT_FOUND: no site par1"
        );
        let mut bare = site();
        bare.default_pool_id = None;
        assert_eq!(
            refusal(decide_add_boot_entry(&add(), Some(&bare), &[], NOW)),
            "INVALID_INPUT: site par1 has no default pool: give --pool POOL"
        );
    }

    #[test]
    fn one_active_entry_per_mac_unless_replaced_in_the_same_append() {
        let old = state_of(&added(&add(), &[]));
        let mut second = add();
        second.entry_id = "boot_2".into();
        second.mac = "aa:bb:cc:dd:ee:0f".into();
        let r = decide_add_boot_entry(&second, Some(&site()), std::slice::from_ref(&old), NOW);
        assert_eq!(
            r.as_ref().err().map(SiteRefusal::code),
            Some("INVALID_STATE")
        );
        assert_eq!(
            refusal(r),
            "INVALID_STATE: site par1 already has active boot entry boot_1 for MAC \
             aa:bb:cc:dd:ee:0f (give --replace to replace it, or remove it first)"
        );
        second.replace = true;
        let events = added(&second, std::slice::from_ref(&old));
        match events.as_slice() {
            [IdentityEvent::BootEntryRemoved(r), IdentityEvent::BootEntryAdded(a)] => {
                assert_eq!(
                    (r.entry_id.as_str(), r.reason.as_str()),
                    ("boot_1", "replaced by boot_2")
                );
                assert_eq!(a.entry_id, "boot_2");
            }
            other => panic!("events {other:?}"),
        }
        // A removed or lapsed entry does not block; another MAC does not either.
        let removed = evolve_boot_entry(Some(old.clone()), &events[0]).expect("entry");
        assert!(removed.removed);
        second.replace = false;
        assert_eq!(added(&second, &[removed]).len(), 1);
        let mut lapsed = old.clone();
        lapsed.not_after_us = NOW;
        assert_eq!(added(&second, &[lapsed]).len(), 1);
        second.mac = "aa:bb:cc:dd:ee:10".into();
        assert_eq!(added(&second, &[old]).len(), 1);
    }

    #[test]
    fn remove_refuses_unknown_and_removed_entries() {
        assert_eq!(
            refusal(decide_remove_boot_entry("boot_9", None, "alice", "")),
            "NOT_FOUND: no boot entry boot_9"
        );
        let entry = state_of(&added(&add(), &[]));
        let d = decide_remove_boot_entry("boot_1", Some(&entry), "alice", "done").expect("ok");
        let removed = evolve_boot_entry(Some(entry.clone()), &d.events[0]).expect("entry");
        assert!(removed.removed);
        assert_eq!(
            refusal(decide_remove_boot_entry(
                "boot_1",
                Some(&removed),
                "alice",
                ""
            )),
            "INVALID_STATE: boot entry boot_1 is already removed"
        );
        assert_eq!(
            refusal(decide_remove_boot_entry("boot_1", Some(&entry), "", "")),
            "INVALID_INPUT: the actor is empty"
        );
    }
}
