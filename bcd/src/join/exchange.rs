//! The agent's join loop (spec 001 "Two-round joins", spec 002 "What the join does" step 4).
//!
//! One key and CSR for the whole exchange ([`crate::join::request::PreparedJoin`]). Each round the
//! producer of the join's attestor builds the evidence (round 1 without a challenge, bound to
//! the CSR's SHA-256; built again for every round, so time-bound evidence is fresh after a
//! pending wait), the request is sent through a [`JoinTransport`] (retryable failures retried up
//! to 20 attempts with [`crate::renewal::schedule::join_retry`], each with the same bytes: a join
//! the control plane committed whose answer was lost is answered again with the identity it
//! issued, issue 40), and the answer is authenticated
//! and classified by [`crate::join::verify::read_join_answer`] before anything of it is used:
//!
//! - **joined**: verified in full (the pinned signing key, this CSR, this key, the role, the node
//!   `--node-id` names) and returned; a deferral is never taken for a join;
//! - **pending**: an operator must approve the join request; logged with its id and the command
//!   that approves it, waited out (at least [`MIN_PENDING_WAIT`], `retry_after_seconds`), then a
//!   fresh round 1 with the same CSR;
//! - **challenge**: answered by the producer of the *same* attestor (another attestor's is
//!   refused), at most [`MAX_CHALLENGES`] rounds, refused once its `not_after` passed.
//!
//! The whole exchange is bounded by [`JoinLoop::approval_timeout`] (`--approval-timeout`, 24 h
//! by default), a clear error when it runs out. [`run_join`] stores a verified join with
//! [`crate::files::identity::store_joined`]; the x509pop re-join stores with
//! [`crate::files::identity::store_rejoined`] ([`crate::node::rejoin`]).

use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

use crate::attest::EvidenceProducer;
use crate::files::identity::{store_joined, JoinStored};
use crate::files::DataDir;
use crate::join::request::{CallError, JoinError, JoinTransport, PreparedJoin};
use crate::join::verify::{read_join_answer, JoinAnswer, JoinExpectation, VerifiedJoin};
use crate::renewal::schedule::{join_retry, JoinRetry};
use domain::pki::{Pin, TrustDomain};

/// The most challenge rounds one exchange answers.
pub const MAX_CHALLENGES: u32 = 3;
/// The shortest wait on a pending answer.
pub const MIN_PENDING_WAIT: Duration = Duration::seconds(1);
/// `--approval-timeout`'s default.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::hours(24);

/// What the loop expects and how long it may take.
#[derive(Debug, Clone)]
pub struct JoinLoop<'a> {
    /// `join_signing_key_pin`: every answer is verified under the key it names.
    pub join_signing: Pin,
    /// The trust domain, when known; else the signed body's is taken.
    pub trust_domain: Option<&'a TrustDomain>,
    /// The node the issued identity must be (`--node-id`, an x509pop re-join).
    pub node_id: Option<&'a str>,
    /// The bound on the whole exchange.
    pub approval_timeout: Duration,
}

/// The loop's side effects, injectable for tests: waiting, jitter, the clock, the log.
pub struct JoinEnv<'a> {
    /// Waits (between attempts, on a pending answer).
    pub sleep: &'a mut dyn FnMut(Duration),
    /// A jitter value in `[0, 1)`.
    pub jitter: &'a mut dyn FnMut() -> f64,
    /// The clock.
    pub now: &'a dyn Fn() -> OffsetDateTime,
    /// One line for the operator (standard error in bcd).
    pub log: &'a mut dyn FnMut(&str),
}

impl std::fmt::Debug for JoinEnv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JoinEnv")
    }
}

/// A verified join, and how many rounds it took.
#[derive(Debug)]
pub struct Exchanged {
    /// The verified answer.
    pub verified: VerifiedJoin,
    /// Requests answered by the control plane (retried attempts not counted).
    pub rounds: u32,
}

/// A stored join.
#[derive(Debug)]
pub struct Joined {
    /// The verified answer.
    pub verified: VerifiedJoin,
    /// What storing did besides the identity.
    pub stored: JoinStored,
}

impl Joined {
    /// `joined as <node> (site <site>, role <role>); certificate valid until <time>`.
    pub fn message(&self) -> String {
        joined_message("joined", &self.verified)
    }
}

/// `<verb> as <node> (site <site>, role <role>); certificate valid until <time>`.
pub fn joined_message(verb: &str, verified: &VerifiedJoin) -> String {
    let leaf = &verified.leaf;
    format!(
        "{verb} as {} (site {}, role {}); certificate valid until {}",
        leaf.spiffe_id.node,
        leaf.spiffe_id.site,
        leaf.role,
        rfc3339(leaf.not_after)
    )
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// Sends `request` until the control plane answers (retrying retryable failures).
fn send(
    transport: &mut dyn JoinTransport,
    prepared: &PreparedJoin,
    attestor: &str,
    pending: Option<&str>,
    env: &mut JoinEnv<'_>,
) -> Result<crate::join::verify::SignedJoinResponse, JoinError> {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match transport.join(&prepared.request) {
            Ok(signed) => return Ok(signed),
            Err(CallError::Refused) => {
                return Err(JoinError::Refused {
                    attestor: attestor.to_owned(),
                    pending: pending.map(str::to_owned),
                })
            }
            Err(CallError::NotWired) => return Err(JoinError::NotWired),
            Err(CallError::Fatal(message)) => return Err(JoinError::Transport(message)),
            Err(CallError::Retryable { message, pushback }) => {
                // Said at every attempt, so a join that waits out an outage shows why.
                (env.log)(&format!("bcd join: attempt {attempt} failed: {message}"));
                match join_retry(attempt, pushback, (env.jitter)()) {
                    JoinRetry::After(delay) => (env.sleep)(delay),
                    JoinRetry::GiveUp => {
                        return Err(JoinError::GaveUp {
                            attempts: attempt,
                            last: message,
                        })
                    }
                }
            }
        }
    }
}

/// Runs the exchange for `prepared` with `producer` and returns the verified join; stores
/// nothing.
pub fn exchange(
    transport: &mut dyn JoinTransport,
    prepared: &mut PreparedJoin,
    producer: &dyn EvidenceProducer,
    options: &JoinLoop<'_>,
    env: &mut JoinEnv<'_>,
) -> Result<Exchanged, JoinError> {
    let attestor = producer.id().to_owned();
    let started = (env.now)();
    let deadline = started + options.approval_timeout;
    let bound = format_duration(options.approval_timeout);
    let csr_sha256 = prepared.request.csr_sha256;
    let mut round = 1u32;
    let mut challenges = 0u32;
    let mut challenge: Option<Vec<u8>> = None;
    let mut pending: Option<String> = None;
    let mut rounds = 0u32;
    crate::fault::point("join:prepared");
    loop {
        prepared.request.evidence = producer.produce(round, &csr_sha256, challenge.as_deref())?;
        let signed = send(transport, prepared, &attestor, pending.as_deref(), env)?;
        rounds += 1;
        crate::fault::point("join:answer-received");
        let expect = JoinExpectation {
            join_signing_pin: options.join_signing,
            csr_sha256,
            node_key: prepared.key.public_key(),
            role: prepared.request.role,
            trust_domain: options.trust_domain,
            node_id: None,
        };
        let answer = read_join_answer(&signed, |body| transport.decode_body(body), &expect)?;
        match answer {
            JoinAnswer::Joined(verified) => {
                if let Some(expected) = options.node_id {
                    let found = verified.leaf.spiffe_id.node.as_str();
                    if found != expected {
                        return Err(JoinError::NotThatNode {
                            found: found.to_owned(),
                            expected: expected.to_owned(),
                        });
                    }
                }
                crate::fault::point("join:verified");
                return Ok(Exchanged {
                    verified: *verified,
                    rounds,
                });
            }
            JoinAnswer::Pending {
                request_id,
                retry_after_seconds,
            } => {
                let now = (env.now)();
                if now >= deadline {
                    return Err(JoinError::ApprovalTimeout {
                        request_id,
                        waited: bound,
                    });
                }
                let wait = Duration::seconds(i64::from(retry_after_seconds))
                    .max(MIN_PENDING_WAIT)
                    .min(deadline - now);
                (env.log)(&format!(
                    "bcd join: waiting for approval of {request_id} (bcctl join-request approve \
                     {request_id}); asking again in {} s",
                    wait.whole_milliseconds().div_euclid(1000).max(1)
                ));
                (env.sleep)(wait);
                pending = Some(request_id);
                // A fresh first round with the same CSR: an attestor with a challenge asks it
                // again, and time-bound evidence is made anew.
                round = 1;
                challenges = 0;
                challenge = None;
            }
            JoinAnswer::Challenge {
                attestor: asking,
                payload,
                not_after_ms,
            } => {
                if asking != attestor {
                    return Err(JoinError::ChallengeForOther {
                        found: asking,
                        ours: attestor,
                    });
                }
                challenges += 1;
                if challenges > MAX_CHALLENGES {
                    return Err(JoinError::TooManyChallenges {
                        attestor,
                        max: MAX_CHALLENGES,
                    });
                }
                let not_after =
                    OffsetDateTime::from_unix_timestamp_nanos(i128::from(not_after_ms) * 1_000_000)
                        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
                let now = (env.now)();
                if now > not_after {
                    return Err(JoinError::ChallengeExpired {
                        attestor,
                        not_after: rfc3339(not_after),
                    });
                }
                if now >= deadline {
                    return Err(JoinError::Timeout(bound));
                }
                (env.log)(&format!(
                    "bcd join: answering the {attestor} challenge (round {})",
                    round + 1
                ));
                round += 1;
                challenge = Some(payload);
            }
        }
    }
}

/// `90s`, `15m`, `24h`, `7d` (the largest unit that divides it), `0s`.
pub fn format_duration(d: Duration) -> String {
    let s = d.whole_seconds();
    for (unit, len) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if s != 0 && s % len == 0 {
            return format!("{}{unit}", s / len);
        }
    }
    format!("{s}s")
}

/// Parses `--approval-timeout`: a whole number with `s`, `m`, `h` or `d` (seconds without).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: i64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (like 90s, 15m, 24h, 7d)"))?;
    let len = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "{text:?} is not a duration (like 90s, 15m, 24h, 7d)"
            ))
        }
    };
    n.checked_mul(len)
        .map(Duration::seconds)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// Runs the exchange and stores the verified join ([`store_joined`]: `node.key`, then
/// `identity.json`). Nothing is written before the answer verified.
pub fn run_join(
    dir: &DataDir,
    transport: &mut dyn JoinTransport,
    mut prepared: PreparedJoin,
    producer: &dyn EvidenceProducer,
    options: &JoinLoop<'_>,
    env: &mut JoinEnv<'_>,
) -> Result<Joined, JoinError> {
    let Exchanged { verified, .. } = exchange(transport, &mut prepared, producer, options, env)?;
    let stored = store_joined(dir, &prepared.key, &verified.stored_identity(), (env.now)())?;
    Ok(Joined { verified, stored })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("24h"), Ok(Duration::hours(24)));
        assert_eq!(parse_duration("90"), Ok(Duration::seconds(90)));
        assert_eq!(parse_duration("7d"), Ok(Duration::days(7)));
        assert!(parse_duration("1w").is_err() && parse_duration("h").is_err());
        assert_eq!(format_duration(Duration::hours(24)), "1d");
        assert_eq!(format_duration(Duration::seconds(90)), "90s");
        assert_eq!(format_duration(Duration::minutes(15)), "15m");
    }
}
