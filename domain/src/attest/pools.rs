//! Pools and their attestor policy (spec 000 "Requiring an attestor"): an operator creates a
//! pool naming the attestors that may admit a machine into it, and replaces that policy as a
//! whole. The ids are checked against the attestors the control plane runs, which the shell
//! passes in (the built-ins and the external attestors of its configuration).

use events::schema::{PoolCreated, PoolUpdated};

use super::state::PoolState;
use crate::identity::{Decision, IdentityEvent};

/// At most this many attestor ids in a pool's policy.
pub const MAX_POOL_ATTESTORS: usize = 16;

/// At most this many bytes of description.
pub const MAX_POOL_DESCRIPTION: usize = 1024;

/// Why an operator command on a pool or a join request was refused. Operator errors (bad input,
/// unknown id, wrong state), never security refusals.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttestAdminRefusal {
    /// Invalid input; the text says which field and why.
    #[error("INVALID_INPUT: {0}")]
    Invalid(String),
    /// No such pool.
    #[error("NOT_FOUND: no pool {0}")]
    UnknownPool(String),
    /// `pool create` of an id that exists.
    #[error("INVALID_STATE: pool {0} already exists")]
    PoolExists(String),
    /// No such join request.
    #[error("NOT_FOUND: no join request {0}")]
    UnknownJoinRequest(String),
    /// The request is not pending.
    #[error("INVALID_STATE: join request {request} is {status}")]
    JoinRequestState {
        /// Request id.
        request: String,
        /// Its status.
        status: &'static str,
    },
    /// The request is pending but past its expiry (maintenance has not expired it yet).
    #[error("INVALID_STATE: join request {0} has expired")]
    JoinRequestExpired(String),
    /// No such entry of an attestor's list (the text names the list's entry and its id).
    #[error("NOT_FOUND: no {0}")]
    UnknownEntry(String),
    /// An add whose key an active entry of the list already holds (the list's own words).
    #[error("INVALID_STATE: {0}")]
    EntryExists(String),
    /// A removal of an entry already removed (the list's own words).
    #[error("INVALID_STATE: {0}")]
    EntryRemoved(String),
}

impl AttestAdminRefusal {
    /// The refusal's code, as the CLI and the API name it.
    pub fn code(&self) -> &'static str {
        match self {
            AttestAdminRefusal::Invalid(_) => "INVALID_INPUT",
            AttestAdminRefusal::UnknownPool(_)
            | AttestAdminRefusal::UnknownJoinRequest(_)
            | AttestAdminRefusal::UnknownEntry(_) => "NOT_FOUND",
            AttestAdminRefusal::PoolExists(_)
            | AttestAdminRefusal::JoinRequestState { .. }
            | AttestAdminRefusal::JoinRequestExpired(_)
            | AttestAdminRefusal::EntryExists(_)
            | AttestAdminRefusal::EntryRemoved(_) => "INVALID_STATE",
        }
    }
}

/// Which attestors may admit a machine into a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttestorPolicy {
    /// Any attestor the control plane runs.
    Any,
    /// Only these (1 to [`MAX_POOL_ATTESTORS`] ids, in the order given).
    Only(Vec<String>),
}

/// `pool create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePool {
    /// Pool id (1 to 128 of A-Z, a-z, 0-9, '.', '-', '_', as a token's pool).
    pub pool_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Free text.
    pub description: String,
    /// Its policy.
    pub join_attestors: AttestorPolicy,
}

/// `pool update`: what is not given stays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatePool {
    /// Pool id.
    pub pool_id: String,
    /// A new description.
    pub description: Option<String>,
    /// A new policy.
    pub join_attestors: Option<AttestorPolicy>,
}

pub(crate) fn check_id(what: &str, value: &str) -> Result<(), AttestAdminRefusal> {
    match crate::plain_id::plain_id_problem(what, value) {
        None => Ok(()),
        Some(problem) => Err(AttestAdminRefusal::Invalid(problem)),
    }
}

pub(crate) fn check_text(what: &str, value: &str, max: usize) -> Result<(), AttestAdminRefusal> {
    if value.len() > max {
        return Err(AttestAdminRefusal::Invalid(format!(
            "the {what} is {} bytes, at most {max}",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(AttestAdminRefusal::Invalid(format!(
            "the {what} holds a control character"
        )));
    }
    Ok(())
}

/// The ids of `policy` as the events carry them (empty: any), checked against `known`, the
/// attestor ids the control plane runs.
fn policy_ids(policy: &AttestorPolicy, known: &[&str]) -> Result<Vec<String>, AttestAdminRefusal> {
    let ids = match policy {
        AttestorPolicy::Any => return Ok(Vec::new()),
        AttestorPolicy::Only(ids) => ids,
    };
    if ids.is_empty() || ids.len() > MAX_POOL_ATTESTORS {
        return Err(AttestAdminRefusal::Invalid(format!(
            "join attestors must be 1 to {MAX_POOL_ATTESTORS} ids, got {}",
            ids.len()
        )));
    }
    for (i, id) in ids.iter().enumerate() {
        if !known.contains(&id.as_str()) {
            return Err(AttestAdminRefusal::Invalid(format!(
                "join attestor {id:?} is not one the control plane runs (it runs: {})",
                known.join(", ")
            )));
        }
        if ids[..i].contains(id) {
            return Err(AttestAdminRefusal::Invalid(format!(
                "join attestor {id:?} is listed twice"
            )));
        }
    }
    Ok(ids.clone())
}

/// Creates a pool; `known` are the attestor ids the control plane runs.
pub fn decide_create_pool(
    cmd: &CreatePool,
    existing: Option<&PoolState>,
    known: &[&str],
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_id("pool id", &cmd.pool_id)?;
    check_id("tenant id", &cmd.tenant_id)?;
    check_text("description", &cmd.description, MAX_POOL_DESCRIPTION)?;
    let join_attestors = policy_ids(&cmd.join_attestors, known)?;
    if existing.is_some() {
        return Err(AttestAdminRefusal::PoolExists(cmd.pool_id.clone()));
    }
    Ok(Decision::events_only(vec![IdentityEvent::PoolCreated(
        PoolCreated {
            pool_id: cmd.pool_id.clone(),
            tenant_id: cmd.tenant_id.clone(),
            description: cmd.description.clone(),
            join_attestors,
        },
    )]))
}

/// Replaces a pool's description and policy (what the command does not name stays).
pub fn decide_update_pool(
    cmd: &UpdatePool,
    pool: Option<&PoolState>,
    known: &[&str],
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_id("pool id", &cmd.pool_id)?;
    if cmd.description.is_none() && cmd.join_attestors.is_none() {
        return Err(AttestAdminRefusal::Invalid(
            "an update names a new description or new join attestors".into(),
        ));
    }
    if let Some(d) = &cmd.description {
        check_text("description", d, MAX_POOL_DESCRIPTION)?;
    }
    let new_ids = match &cmd.join_attestors {
        Some(policy) => Some(policy_ids(policy, known)?),
        None => None,
    };
    let pool = pool.ok_or_else(|| AttestAdminRefusal::UnknownPool(cmd.pool_id.clone()))?;
    Ok(Decision::events_only(vec![IdentityEvent::PoolUpdated(
        PoolUpdated {
            pool_id: pool.pool_id.clone(),
            description: cmd
                .description
                .clone()
                .unwrap_or_else(|| pool.description.clone()),
            join_attestors: new_ids
                .unwrap_or_else(|| pool.join_attestors.clone().unwrap_or_default()),
        },
    )]))
}

/// Applies an event to a pool's state (`None` before `pool.created`).
pub fn evolve_pool(state: Option<PoolState>, event: &IdentityEvent) -> Option<PoolState> {
    let policy = |ids: &[String]| (!ids.is_empty()).then(|| ids.to_vec());
    match (state, event) {
        (None, IdentityEvent::PoolCreated(e)) => Some(PoolState {
            pool_id: e.pool_id.clone(),
            tenant_id: e.tenant_id.clone(),
            description: e.description.clone(),
            join_attestors: policy(&e.join_attestors),
        }),
        (Some(mut s), IdentityEvent::PoolUpdated(e)) => {
            s.description = e.description.clone();
            s.join_attestors = policy(&e.join_attestors);
            Some(s)
        }
        (s, _) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["join-token", "x509pop", "provisioned"];

    fn create(ids: AttestorPolicy) -> CreatePool {
        CreatePool {
            pool_id: "edge".into(),
            tenant_id: "acme".into(),
            description: "edge boxes".into(),
            join_attestors: ids,
        }
    }

    fn only(ids: &[&str]) -> AttestorPolicy {
        AttestorPolicy::Only(ids.iter().map(|s| s.to_string()).collect())
    }

    fn refusal(r: Result<Decision<()>, AttestAdminRefusal>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(d) => panic!("decided {:?}", d.events),
        }
    }

    #[test]
    fn create_records_the_policy_in_order_and_evolves_to_it() {
        let d = decide_create_pool(&create(only(&["x509pop", "join-token"])), None, KNOWN)
            .expect("valid");
        let state = d.events.iter().fold(None, evolve_pool).expect("created");
        assert_eq!(
            state.join_attestors,
            Some(vec!["x509pop".to_string(), "join-token".to_string()])
        );
        assert!(state.admits("x509pop") && !state.admits("provisioned"));
        let any = decide_create_pool(&create(AttestorPolicy::Any), None, KNOWN).expect("valid");
        let state = any.events.iter().fold(None, evolve_pool).expect("created");
        assert_eq!(state.join_attestors, None);
        assert!(state.admits("provisioned"));
    }

    #[test]
    fn create_refuses_each_bad_input_naming_it() {
        assert_eq!(
            refusal(decide_create_pool(&create(only(&["tpm"])), None, KNOWN)),
            "INVALID_INPUT: join attestor \"tpm\" is not one the control plane runs \
             (it runs: join-token, x509pop, provisioned)"
        );
        assert_eq!(
            refusal(decide_create_pool(&create(only(&[])), None, KNOWN)),
            "INVALID_INPUT: join attestors must be 1 to 16 ids, got 0"
        );
        let many: Vec<String> = (0..17).map(|_| "x509pop".to_string()).collect();
        assert_eq!(
            refusal(decide_create_pool(
                &create(AttestorPolicy::Only(many)),
                None,
                KNOWN
            )),
            "INVALID_INPUT: join attestors must be 1 to 16 ids, got 17"
        );
        assert_eq!(
            refusal(decide_create_pool(
                &create(only(&["x509pop", "x509pop"])),
                None,
                KNOWN
            )),
            "INVALID_INPUT: join attestor \"x509pop\" is listed twice"
        );
        let mut bad_id = create(AttestorPolicy::Any);
        bad_id.pool_id = "edge/1".into();
        assert_eq!(
            refusal(decide_create_pool(&bad_id, None, KNOWN)),
            "INVALID_INPUT: pool id \"edge/1\" must be 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'"
        );
        let mut bad_text = create(AttestorPolicy::Any);
        bad_text.description = "a\nb".into();
        assert_eq!(
            refusal(decide_create_pool(&bad_text, None, KNOWN)),
            "INVALID_INPUT: the description holds a control character"
        );
    }

    #[test]
    fn create_of_an_existing_pool_and_update_of_a_missing_one_are_refused() {
        let d = decide_create_pool(&create(AttestorPolicy::Any), None, KNOWN).expect("valid");
        let state = d.events.iter().fold(None, evolve_pool);
        assert_eq!(
            refusal(decide_create_pool(
                &create(AttestorPolicy::Any),
                state.as_ref(),
                KNOWN
            )),
            "INVALID_STATE: pool edge already exists"
        );
        let update = UpdatePool {
            pool_id: "edge".into(),
            description: None,
            join_attestors: Some(only(&["x509pop"])),
        };
        assert_eq!(
            refusal(decide_update_pool(&update, None, KNOWN)),
            "NOT_FOUND: no pool edge"
        );
    }

    #[test]
    fn update_replaces_what_it_names_and_keeps_the_rest() {
        let d = decide_create_pool(&create(only(&["x509pop"])), None, KNOWN).expect("valid");
        let state = d.events.iter().fold(None, evolve_pool);
        let only_text = UpdatePool {
            pool_id: "edge".into(),
            description: Some("racks".into()),
            join_attestors: None,
        };
        let d = decide_update_pool(&only_text, state.as_ref(), KNOWN).expect("valid");
        let state = d.events.iter().fold(state, evolve_pool);
        let s = state.clone().expect("pool");
        assert_eq!(s.description, "racks");
        assert_eq!(s.join_attestors, Some(vec!["x509pop".to_string()]));
        let to_any = UpdatePool {
            pool_id: "edge".into(),
            description: None,
            join_attestors: Some(AttestorPolicy::Any),
        };
        let d = decide_update_pool(&to_any, state.as_ref(), KNOWN).expect("valid");
        let s = d
            .events
            .iter()
            .fold(state.clone(), evolve_pool)
            .expect("pool");
        assert_eq!((s.description.as_str(), s.join_attestors), ("racks", None));
        let nothing = UpdatePool {
            pool_id: "edge".into(),
            description: None,
            join_attestors: None,
        };
        assert_eq!(
            refusal(decide_update_pool(&nothing, state.as_ref(), KNOWN)),
            "INVALID_INPUT: an update names a new description or new join attestors"
        );
        let unknown = UpdatePool {
            join_attestors: Some(only(&["tpm"])),
            ..nothing
        };
        assert!(refusal(decide_update_pool(&unknown, state.as_ref(), KNOWN))
            .starts_with("INVALID_INPUT: join attestor \"tpm\""));
    }
}
