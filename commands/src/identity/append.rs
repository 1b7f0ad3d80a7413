//! How the identity, attestation and site handlers append what a decider decided: each stream
//! at the version its state was read at, all in one append with the identity projections.

use domain::identity::IdentityEvent;
use events::store::{ExpectedVersion, StoreTx, StreamAppend};
use events::{new_event_id, NewEvent};

use super::error::IdentityError;
use crate::run::append_streams_and_project;

/// Groups decided events by stream, keeping their order, streams in order of first appearance.
fn by_stream(events: Vec<IdentityEvent>) -> Vec<(String, Vec<IdentityEvent>)> {
    let mut out: Vec<(String, Vec<IdentityEvent>)> = Vec::new();
    for e in events {
        let s = e.stream();
        match out.iter_mut().find(|(name, _)| *name == s) {
            Some((_, list)) => list.push(e),
            None => out.push((s, vec![e])),
        }
    }
    out
}

fn expected(version: Option<i64>) -> ExpectedVersion {
    match version {
        None | Some(0) => ExpectedVersion::NoStream,
        Some(v) => ExpectedVersion::Exact(u64::try_from(v).unwrap_or(0)),
    }
}

/// Appends decided events: each stream at the version its state was read at, all streams in
/// one append ([`crate::run::append_streams_and_project`]).
pub(crate) async fn append_decided(
    tx: &mut StoreTx,
    events: Vec<IdentityEvent>,
    tenant: &str,
    now_us: i64,
    versions: &[(String, Option<i64>)],
) -> Result<(), IdentityError> {
    let grouped: Vec<(String, ExpectedVersion, Vec<NewEvent>)> = by_stream(events)
        .into_iter()
        .map(|(stream, list)| {
            let version = versions
                .iter()
                .find(|(s, _)| *s == stream)
                .and_then(|(_, v)| *v);
            let new = list
                .iter()
                .map(|e| e.to_new_event(new_event_id(), tenant, now_us))
                .collect();
            (stream, expected(version), new)
        })
        .collect();
    let appends: Vec<StreamAppend<'_>> = grouped
        .iter()
        .map(|(stream, expected, events)| StreamAppend {
            stream,
            expected: *expected,
            events,
        })
        .collect();
    append_streams_and_project(tx, &projections::identity::all(), &appends).await?;
    Ok(())
}

pub(crate) fn fresh_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}
