//! One node session, whatever carries it: the gRPC `NodeService.Session` stream
//! ([`crate::node_service::server`]) or the session wire of our own
//! ([`crate::session::session_wire`]). Both hand [`NodeServer::open_session`] the identity their
//! connection proved and the node's messages as a [`NodeInbound`], and send what the session's
//! receiver yields.
//!
//! A session checks the identity's validity against the clock before anything else, then the
//! feed's freshness, registers, checks revocation, and runs one task for as long as it lives: its
//! loop is biased (its end, the certificate's expiry, commands to send, a new revocation list,
//! then the node's messages; the current list follows Welcome when Hello asked for it);
//! see [`crate::node_service::server`] for what each message does.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use commands::quorum::TrustReport;
use proto::{
    gateway_message, node_message, GatewayMessage, NodeMessage, RevocationNotice, Welcome,
};
use time::OffsetDateTime;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use crate::edge::tls::VerifiedNode;
use crate::node_commands::dispatch::{SessionCommands, SessionItem};
use crate::node_service::server::{NodeServer, NO_CERTIFICATE};
use crate::revocation::feed_health::{halted_end, reloaded_end};
use crate::session::registry::SessionEnd;
use crate::session::validity::check_validity;
use crate::trust::bundle::WelcomeTrust;
use crate::trust::reports::{Held, Queued, Seen, SessionReports, Skipped};

/// Where a session reads the node's messages from. `message` must be cancel-safe: the session's
/// loop drops it whenever another branch wins.
pub(crate) trait NodeInbound: Send + 'static {
    /// The next message; `None` when the node ended the stream.
    fn message(&mut self) -> impl Future<Output = Result<Option<NodeMessage>, Status>> + Send;
}

impl NodeInbound for Streaming<NodeMessage> {
    fn message(&mut self) -> impl Future<Output = Result<Option<NodeMessage>, Status>> + Send {
        Streaming::message(self)
    }
}

/// The session wire's connection task hands the session each message it read (boxed: the
/// channel's slots stay a pointer wide); the channel closes when the connection ends.
impl NodeInbound for mpsc::Receiver<Box<NodeMessage>> {
    async fn message(&mut self) -> Result<Option<NodeMessage>, Status> {
        Ok(self.recv().await.map(|message| *message))
    }
}

impl NodeServer {
    /// Opens a session for the node its connection proved (`None`: no client certificate,
    /// refused), reading the node's messages from `inbound`: the refusal, or the receiver of
    /// what the gateway sends, which ends when the session does.
    pub(crate) async fn open_session<I: NodeInbound>(
        &self,
        node: Option<VerifiedNode>,
        mut inbound: I,
    ) -> Result<mpsc::Receiver<SessionItem>, Status> {
        let Some(node) = node else {
            self.metrics.sessions_refused.inc("no-certificate");
            return Err(Status::unauthenticated(NO_CERTIFICATE));
        };
        // Before anything else: an identity outside its validity gets nothing.
        let identity = node.identity().clone();
        if let Err(refusal) = check_validity(&identity, self.clock.now()) {
            self.metrics.sessions_refused.inc(refusal.label());
            tracing::info!(node = %identity.spiffe_id, serial = %identity.serial.to_hex(), refusal = %refusal, "session refused");
            return Err(Status::unauthenticated(refusal.to_string()));
        }
        if self.feed.is_stale() {
            self.metrics.sessions_refused.inc("feed-stale");
            return Err(self.feed.session_refusal_status());
        }
        let node_id = identity.spiffe_id.node.as_str().to_string();
        let serial_hex = identity.serial.to_hex();
        // Register before the last revocation check: a revocation the feed applies after this
        // check finds the session registered; one applied before it is in the set.
        let registered = self.sessions.register(&node_id, &serial_hex);
        let (guard, mut end, wake) = (registered.guard, registered.end, registered.wake);
        if self.revoked.contains(identity.serial.as_bytes()) {
            self.metrics.sessions_refused.inc("revoked");
            return Err(Status::unauthenticated("this certificate is revoked"));
        }
        self.metrics.sessions_opened.fetch_add(1, Ordering::Relaxed);
        let tenant = self.tenant_of(&node_id).await;
        // Room for a Welcome and one fetch of commands.
        let (tx, rx) =
            mpsc::channel::<SessionItem>(8 + crate::node_commands::dispatch::FETCH_LIMIT as usize);
        let this = self.clone();
        let not_after = identity.not_after;
        let expires_in = left_until(not_after, self.clock.now());
        // The task lives as long as the session, idle nearly all of it: the awaits that read
        // the store (dispatch, answer, the trust bundle) are boxed, so their state is allocated
        // while they run instead of sizing every session's task (2.7 KiB -> 1.7 KiB, C17).
        tokio::spawn(async move {
            let _guard = guard;
            let expiry = tokio::time::sleep(expires_in);
            tokio::pin!(expiry);
            let mut reports = SessionReports::default();
            // The bcd version and boot id are reported once per session, at its first Hello.
            let mut runtime_reported = false;
            // The trust version of the last Welcome sent on this session.
            let mut welcomed_version = 0u64;
            // The revocation list: the current one after Welcome, then each new one.
            let mut crl = this.crl.clone();
            let (mut crl_open, mut crl_wanted) = (true, false);
            let mut commands = SessionCommands::new(
                this.queue.clone(),
                node_id.clone(),
                this.metrics.commands.clone(),
            );
            let expired = || {
                Err(Status::unauthenticated(
                    "the session's certificate expired; reconnect with the renewed one",
                ))
            };
            loop {
                let retry_at = commands.retry_at();
                tokio::select! {
                    // Order matters: a revocation or shutdown first, then the expiry, then
                    // commands to send, and only then the node's messages, however many are
                    // waiting.
                    biased;
                    ended = &mut end => {
                        if let Ok(SessionEnd::Shutdown) = ended {
                            let _ = tx.send(Err(Status::unavailable("the gateway is shutting down; reconnect"))).await;
                        } else if let Ok(SessionEnd::FeedHalted(why)) = ended {
                            let _ = tx.send(Err(halted_end(&why))).await;
                        } else if let Ok(SessionEnd::FeedReloaded) = ended {
                            let _ = tx.send(Err(reloaded_end())).await;
                        } else if let Ok(SessionEnd::Revoked { serial, reason }) = ended {
                            let notice = GatewayMessage {
                                body: Some(gateway_message::Body::Revocation(RevocationNotice {
                                    serial,
                                    reason,
                                    revoked_at_ms: this.clock.now_us() / 1000,
                                })),
                            };
                            if tx.send(Ok(Box::new(notice))).await.is_ok() {
                                this.metrics.revocation_notices.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        break;
                    }
                    _ = &mut expiry => {
                        let _ = tx.send(expired()).await;
                        break;
                    }
                    _ = wake.notified(), if commands.is_welcomed() => {
                        if this.clock.now() >= not_after {
                            let _ = tx.send(expired()).await;
                            break;
                        }
                        if Box::pin(commands.dispatch(&tx)).await.is_err() {
                            break;
                        }
                    }
                    _ = sleep_until_or_never(retry_at), if retry_at.is_some() && commands.is_welcomed() => {
                        if this.clock.now() >= not_after {
                            let _ = tx.send(expired()).await;
                            break;
                        }
                        if Box::pin(commands.dispatch(&tx)).await.is_err() {
                            break;
                        }
                    }
                    changed = crl.changed(), if crl_open && crl_wanted && commands.is_welcomed() => {
                        crl_open = changed.is_ok();
                        let list = crl.borrow_and_update().clone();
                        if let Some(message) = list.as_deref().and_then(revocation_list) {
                            if tx.send(Ok(Box::new(message))).await.is_err() {
                                break;
                            }
                        }
                    }
                    msg = inbound.message() => {
                        // The timer may not have fired yet at the very edge of notAfter.
                        if this.clock.now() >= not_after {
                            let _ = tx.send(expired()).await;
                            break;
                        }
                        match msg {
                            Ok(Some(NodeMessage { body: Some(node_message::Body::Hello(hello)) })) => {
                                let trust = match Box::pin(this.backend.trust()).await {
                                    Ok(t) => t,
                                    Err(e) => {
                                        tracing::warn!(error = %e, "Welcome without a trust bundle");
                                        WelcomeTrust::default()
                                    }
                                };
                                welcomed_version = trust.version;
                                let welcome = this.welcome(trust);
                                this.record(&mut reports, tenant.as_deref(), &node_id, Seen::Hello(Held::from(&hello)));
                                if let (Some(tenant), false) = (tenant.as_deref(), runtime_reported) {
                                    runtime_reported = true;
                                    this.runtime.report(tenant, &node_id, &hello);
                                }
                                tracing::debug!(node = %node_id, trust_version = hello.trust_version, approver_set_epoch = hello.approver_set_epoch, agent = %hello.agent_version, boot_id = %hello.boot_id, "session hello");
                                if tx.send(Ok(Box::new(welcome))).await.is_err() {
                                    break;
                                }
                                commands.welcomed();
                                crl_wanted = hello.revocation_list;
                                let list = crl.borrow_and_update().clone().filter(|_| crl_wanted);
                                if let Some(message) = list.as_deref().and_then(revocation_list) {
                                    if tx.send(Ok(Box::new(message))).await.is_err() {
                                        break;
                                    }
                                }
                                if Box::pin(commands.dispatch(&tx)).await.is_err() {
                                    break;
                                }
                            }
                            Ok(Some(NodeMessage { body: Some(node_message::Body::Status(status)) })) => {
                                this.record(&mut reports, tenant.as_deref(), &node_id, Seen::Status(Held::from(&status)));
                                // A bundle published since this session's Welcome reaches the
                                // node at its next status report (a root rotation's stages wait
                                // on connected nodes holding it), once per published version.
                                if commands.is_welcomed() {
                                    if let Ok(trust) = Box::pin(this.backend.trust()).await {
                                        if trust.version > welcomed_version
                                            && trust.version > status.trust_version
                                        {
                                            welcomed_version = trust.version;
                                            if tx.send(Ok(Box::new(this.welcome(trust)))).await.is_err() {
                                                break;
                                            }
                                        }
                                    }
                                }
                            }
                            Ok(Some(NodeMessage { body: Some(node_message::Body::Result(result)) })) => {
                                match Box::pin(commands.answer(&result)).await {
                                    Ok(true) => {
                                        if Box::pin(commands.dispatch(&tx)).await.is_err() {
                                            break;
                                        }
                                    }
                                    Ok(false) => {}
                                    Err(cut_off) => {
                                        let _ = tx.send(Err(cut_off)).await;
                                        break;
                                    }
                                }
                            }
                            Ok(Some(_)) => {}
                            Ok(None) | Err(_) => break,
                        }
                    }
                }
            }
            this.record(&mut reports, tenant.as_deref(), &node_id, Seen::End);
        });
        Ok(rx)
    }

    /// A Welcome carrying `trust`, stamped with server time.
    fn welcome(&self, trust: WelcomeTrust) -> GatewayMessage {
        GatewayMessage {
            body: Some(gateway_message::Body::Welcome(Welcome {
                server_time_ms: self.clock.now_us() / 1000,
                trust_version: trust.version,
                signed_trust_bundle: trust.bundle,
                trust_bundle_signature: trust.signature,
            })),
        }
    }

    /// Records what a session saw, if it changes the node's (connected, trust version) and the
    /// session is within its bound; counts what it skips or drops.
    fn record(
        &self,
        reports: &mut SessionReports,
        tenant: Option<&str>,
        node_id: &str,
        seen: Seen,
    ) {
        let Some(tenant) = tenant else {
            return;
        };
        let counters = &self.metrics.trust_reports;
        let (session_start, connected, held) = match reports.admit(seen) {
            Ok(r) => r,
            Err(Skipped::Unchanged) => {
                counters.unchanged.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(Skipped::OverBound) => {
                if counters.over_bound.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::info!(node = node_id, bound = crate::trust::reports::MAX_REPORTS_PER_SESSION, "a session reached its bound of trust reports; further changes are dropped until the node reconnects");
                }
                return;
            }
        };
        let outcome = self.reporter.report(TrustReport {
            tenant_id: tenant.to_string(),
            node_id: node_id.to_string(),
            trust_version: held.trust_version,
            session_start,
            connected,
            approver_set_epoch: held.approver_set_epoch,
            approver_set_sha256: held.approver_set_sha256,
        });
        match outcome {
            Queued::Queued => {
                counters.queued.fetch_add(1, Ordering::Relaxed);
            }
            Queued::Dropped { warned } => {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
                if warned {
                    counters.warn_lines.fetch_add(1, Ordering::Relaxed);
                }
            }
            Queued::Disabled => {}
        }
    }
}

/// Sleeps until `at`, or forever without one.
/// The `RevocationList` message of `list`, unless it is too large to push.
fn revocation_list(list: &crate::publish::crl::PublishedCrl) -> Option<GatewayMessage> {
    (list.der.len() <= crate::publish::crl::MAX_PUSH_BYTES).then(|| GatewayMessage {
        body: Some(gateway_message::Body::RevocationList(
            proto::RevocationList {
                der: list.der.clone(),
            },
        )),
    })
}

pub(crate) async fn sleep_until_or_never(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn left_until(at: OffsetDateTime, now: OffsetDateTime) -> Duration {
    Duration::try_from(at - now).unwrap_or(Duration::ZERO)
}
