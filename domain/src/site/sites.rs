//! `site create`: a site id (lower-case a-z, 0-9 and '-', 1 to 63, a SPIFFE path segment), its
//! tenant, an optional default pool for the machines it commissions, and free text. An id that
//! exists is refused.

use events::schema::SiteCreated;

use super::{check_actor, check_id, check_text, SiteRefusal, MAX_SITE_TEXT};
use crate::identity::{Decision, IdentityEvent};

/// A site as its stream leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteState {
    /// Its id.
    pub site_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Free text.
    pub description: String,
    /// The pool a boot entry naming none joins (`None`: each entry must name one).
    pub default_pool_id: Option<String>,
}

/// `site create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSite {
    /// The new site's id.
    pub site_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Free text (may be empty).
    pub description: String,
    /// The pool its discovered machines join when their entry names none.
    pub default_pool_id: Option<String>,
    /// Who creates it.
    pub actor: String,
}

/// A site id: 1 to 63 of lower-case a-z, 0-9 and '-' (so it is a DNS label and a SPIFFE
/// segment).
pub fn check_site_id(site_id: &str) -> Result<(), SiteRefusal> {
    let ok = !site_id.is_empty()
        && site_id.len() <= 63
        && site_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(SiteRefusal::Invalid(format!(
            "site id {site_id:?} must be 1 to 63 of lower-case a-z, 0-9 and '-'"
        )))
    }
}

/// Creates a site; `existing` is the site with that id, if one exists.
pub fn decide_create_site(
    cmd: &CreateSite,
    existing: Option<&SiteState>,
) -> Result<Decision<()>, SiteRefusal> {
    check_site_id(&cmd.site_id)?;
    check_id("tenant id", &cmd.tenant_id)?;
    if let Some(pool) = &cmd.default_pool_id {
        check_id("default pool id", pool)?;
    }
    check_text("description", &cmd.description, MAX_SITE_TEXT)?;
    check_actor(&cmd.actor)?;
    if existing.is_some() {
        return Err(SiteRefusal::SiteExists(cmd.site_id.clone()));
    }
    Ok(Decision::events_only(vec![IdentityEvent::SiteCreated(
        SiteCreated {
            site_id: cmd.site_id.clone(),
            tenant_id: cmd.tenant_id.clone(),
            description: cmd.description.clone(),
            default_pool_id: cmd.default_pool_id.clone().unwrap_or_default(),
            actor: cmd.actor.clone(),
        },
    )]))
}

/// Applies an event to a site's state (`None` before `site.created`).
pub fn evolve_site(state: Option<SiteState>, event: &IdentityEvent) -> Option<SiteState> {
    match (state, event) {
        (None, IdentityEvent::SiteCreated(e)) => Some(SiteState {
            site_id: e.site_id.clone(),
            tenant_id: e.tenant_id.clone(),
            description: e.description.clone(),
            default_pool_id: (!e.default_pool_id.is_empty()).then(|| e.default_pool_id.clone()),
        }),
        (s, _) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create() -> CreateSite {
        CreateSite {
            site_id: "par1".into(),
            tenant_id: "acme".into(),
            description: "Paris".into(),
            default_pool_id: Some("edge".into()),
            actor: "alice".into(),
        }
    }

    fn refusal(r: Result<Decision<()>, SiteRefusal>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(d) => panic!("admitted: {:?}", d.events),
        }
    }

    #[test]
    fn create_writes_one_event_and_evolves_into_the_site() {
        let d = decide_create_site(&create(), None).expect("created");
        let [event] = d.events.as_slice() else {
            panic!("events {:?}", d.events)
        };
        assert_eq!(event.stream(), "site/par1");
        let state = evolve_site(None, event).expect("a site");
        assert_eq!(
            state,
            SiteState {
                site_id: "par1".into(),
                tenant_id: "acme".into(),
                description: "Paris".into(),
                default_pool_id: Some("edge".into()),
            }
        );
        let mut no_pool = create();
        no_pool.default_pool_id = None;
        let d = decide_create_site(&no_pool, None).expect("created");
        assert_eq!(
            evolve_site(None, &d.events[0]).and_then(|s| s.default_pool_id),
            None
        );
    }

    #[test]
    fn create_refuses_each_bad_id_bad_input_and_an_existing_site() {
        let with = |f: fn(&mut CreateSite)| {
            let mut c = create();
            f(&mut c);
            refusal(decide_create_site(&c, None))
        };
        let bad_id =
            "INVALID_INPUT: site id \"Par1\" must be 1 to 63 of lower-case a-z, 0-9 and '-'";
        assert_eq!(with(|c| c.site_id = "Par1".into()), bad_id);
        assert!(with(|c| c.site_id = String::new()).starts_with("INVALID_INPUT: site id \"\""));
        assert!(with(|c| c.site_id = "a".repeat(64)).contains("1 to 63"));
        assert!(with(|c| c.site_id = "par_1".into()).contains("1 to 63"));
        assert!(with(|c| c.site_id = "par.1".into()).contains("1 to 63"));
        let mut ok = create();
        ok.site_id = "a".repeat(63);
        assert!(decide_create_site(&ok, None).is_ok());
        assert!(with(|c| c.tenant_id = String::new()).starts_with("INVALID_INPUT: tenant id"));
        assert!(with(|c| c.default_pool_id = Some("a b".into()))
            .starts_with("INVALID_INPUT: default pool id"));
        assert_eq!(
            with(|c| c.description = "x\ny".into()),
            "INVALID_INPUT: the description holds a control character"
        );
        assert_eq!(
            with(|c| c.actor = String::new()),
            "INVALID_INPUT: the actor is empty"
        );
        let existing = evolve_site(
            None,
            &decide_create_site(&create(), None).expect("ok").events[0],
        );
        let r = decide_create_site(&create(), existing.as_ref());
        assert_eq!(
            r.as_ref().err().map(SiteRefusal::code),
            Some("INVALID_STATE")
        );
        assert_eq!(refusal(r), "INVALID_STATE: site par1 already exists");
    }
}
