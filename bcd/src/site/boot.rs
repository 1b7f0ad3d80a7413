//! The boot server's answers: `GET /boot.ipxe?mac=<mac>[&uuid=<uuid>][&ip=<ip>]` and
//! `GET /healthz` ([`answer`]).
//!
//! For a boot script the agent, holding the lease live at epoch `E`, asks the control plane for
//! the MAC's boot entry and a discovery token (`BootToken(mac, E)`) unless it holds one for
//! that MAC at `E` with time left ([`super::cache`], decision 0083), signs a
//! [`DiscoveryAssertion`] with its node key ([`assertion_for`]), and renders the script
//! ([`render_script`]) with both on the kernel line. The token and the assertion are never
//! logged: the log names the entry and the MAC.
//!
//! | answer | when |
//! | --- | --- |
//! | 200 `text/plain` script | the entry exists and the lease is held |
//! | 429 | the client is over its rate bound ([`super::limit`]) |
//! | 400 | no `mac=`, or one that is not six hex pairs |
//! | 404 | no active boot entry for the MAC (`NOT_FOUND`) |
//! | 503 | the lease is not held (or lapsed, or the control plane says so) |
//! | 502 | the control plane could not be asked |

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use domain::attest::discovery::wire::{
    normalize_mac, DiscoveryAssertion, SignedDiscoveryAssertion, CMDLINE_ASSERTION, CMDLINE_TOKEN,
    MAX_ASSERTION_AGE_MS,
};
use domain::site::SiteCall;

use super::agent::{SiteAgent, SiteShared};
use super::cache::reusable;
use super::http::{HttpRequest, HttpResponse};
use super::lease::local_now_ms;
use super::limit::TOO_MANY;
use super::log_line::site_log;
use crate::client::describe_status;

/// How long a BootToken call may take before the script request is answered 502.
pub const BOOT_TOKEN_TIMEOUT: StdDuration = StdDuration::from_secs(10);

/// What `/boot.ipxe` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootQuery {
    /// The MAC, normalized.
    pub mac: String,
    /// `uuid=`, when given and not empty.
    pub uuid: Option<String>,
    /// `ip=`, when given and not empty.
    pub ip: Option<String>,
}

/// Decodes `%XX` and `+` in a query value.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Parses a `/boot.ipxe` query; the error is the 400 answer's text.
pub fn parse_query(query: &str) -> Result<BootQuery, String> {
    let (mut mac, mut uuid, mut ip) = (None, None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value =
            percent_decode(value).ok_or_else(|| format!("{key}= is not URL-encoded text"))?;
        let value = Some(value.trim().to_owned()).filter(|v| !v.is_empty());
        match key {
            "mac" => mac = value,
            "uuid" => uuid = value,
            "ip" => ip = value,
            _ => {}
        }
    }
    let raw = mac.ok_or_else(|| "no mac= in the query (boot.ipxe?mac=${net0/mac})".to_owned())?;
    let mac = normalize_mac(&raw)
        .ok_or_else(|| format!("mac={raw:?} is not a MAC address (six hex pairs)"))?;
    if let Some(ip) = &ip {
        ip.parse::<IpAddr>()
            .map_err(|_| format!("ip={ip:?} is not an IP address"))?;
    }
    Ok(BootQuery { mac, uuid, ip })
}

/// The assertion for a script: signed by `agent` at `epoch`, issued at `server_now_ms`.
pub fn assertion_for(
    agent: &SiteAgent,
    epoch: u64,
    query: &BootQuery,
    peer: IpAddr,
    entry: &proto::BootTokenResponse,
    server_now_ms: i64,
) -> DiscoveryAssertion {
    let mut not_after = server_now_ms.saturating_add(MAX_ASSERTION_AGE_MS);
    for end in [entry.entry_not_after_ms, entry.token_expires_at_ms] {
        if end > 0 {
            not_after = not_after.min(end);
        }
    }
    DiscoveryAssertion {
        site_id: agent.site_id.clone(),
        signer_node_id: agent.node_id.clone(),
        lease_epoch: epoch,
        mac: normalize_mac(&entry.mac).unwrap_or_else(|| query.mac.clone()),
        ip: query
            .ip
            .clone()
            .unwrap_or_else(|| peer.to_canonical().to_string()),
        product_uuid: query
            .uuid
            .clone()
            .unwrap_or_else(|| entry.product_uuid.clone()),
        workflow_id: entry.entry_id.clone(),
        issued_at_ms: server_now_ms,
        not_after_ms: not_after,
    }
}

/// The iPXE script: the entry's kernel with its arguments, the token and the assertion.
pub fn render_script(entry: &proto::BootTokenResponse, assertion_b64: &str) -> String {
    let args = entry.kernel_args.trim();
    let args = if args.is_empty() {
        String::new()
    } else {
        format!("{args} ")
    };
    format!(
        "#!ipxe\nkernel {} {args}{CMDLINE_TOKEN}={} {CMDLINE_ASSERTION}={assertion_b64}\ninitrd {}\nboot\n",
        entry.kernel_url, entry.token, entry.initrd_url
    )
}

fn not_held() -> HttpResponse {
    HttpResponse::text(
        503,
        "this site agent does not hold the boot lease: it vouches for no machine now\n",
    )
}

/// Answers one request.
pub async fn answer(shared: Arc<SiteShared>, request: HttpRequest) -> HttpResponse {
    match request.path.as_str() {
        "/healthz" => HttpResponse::json(200, &shared.view().health_json(local_now_ms())),
        "/boot.ipxe" => boot_script(&shared, &request).await,
        _ => HttpResponse::text(
            404,
            "not found: this server answers /boot.ipxe and /healthz\n",
        ),
    }
}

async fn boot_script(shared: &SiteShared, request: &HttpRequest) -> HttpResponse {
    if !shared.limiter.allow(request.peer, Instant::now()) {
        return HttpResponse::text(429, TOO_MANY);
    }
    let query = match parse_query(&request.query) {
        Ok(query) => query,
        Err(why) => return HttpResponse::text(400, &format!("{why}\n")),
    };
    let Some(epoch) = shared.view().live_epoch(local_now_ms()) else {
        site_log(format_args!(
            "boot script for {} refused: the boot lease is not held",
            query.mac
        ));
        return not_held();
    };
    let Some(agent) = shared.current_agent() else {
        return not_held();
    };
    let entry = match cached_or_asked(shared, &agent, &query.mac, epoch).await {
        Ok(entry) => entry,
        Err(answer) => return answer,
    };
    // The lease may have lapsed during the call: judge it again before signing.
    let view = shared.view();
    let now = local_now_ms();
    if view.live_epoch(now) != Some(epoch) {
        return not_held();
    }
    let assertion = assertion_for(
        &agent,
        epoch,
        &query,
        request.peer,
        &entry,
        view.server_now_ms(now),
    );
    let signed =
        match SignedDiscoveryAssertion::sign(&assertion, agent.leaf_der.clone(), &agent.key) {
            Ok(signed) => signed,
            Err(e) => {
                site_log(format_args!(
                    "boot script for {} (entry {}): signing the assertion failed: {e}",
                    query.mac, entry.entry_id
                ));
                return HttpResponse::text(
                    500,
                    "signing the assertion failed; see the agent's log\n",
                );
            }
        };
    site_log(format_args!(
        "boot script for {} (entry {}, epoch {epoch}) served to {}",
        query.mac,
        entry.entry_id,
        request.peer.to_canonical()
    ));
    HttpResponse::text(200, &render_script(&entry, &signed.to_cmdline()))
}

/// The MAC's boot entry and token at `epoch`: the cached answer while its token is reusable
/// ([`super::cache`]), else a new `BootToken` (cached when answered). Asks for one MAC wait for
/// each other, so a burst of them makes one call. The error is the HTTP answer.
async fn cached_or_asked(
    shared: &SiteShared,
    agent: &SiteAgent,
    mac: &str,
    epoch: u64,
) -> Result<proto::BootTokenResponse, HttpResponse> {
    let server_now = |shared: &SiteShared| shared.view().server_now_ms(local_now_ms());
    let slot = shared.boot_tokens.slot(mac, epoch, server_now(shared));
    let mut cached = slot.lock().await;
    if let Some(answer) = cached.as_ref().filter(|a| reusable(a, server_now(shared))) {
        return Ok(answer.clone());
    }
    *cached = None;
    let answer = ask_boot_token(shared, agent, mac, epoch).await?;
    *cached = Some(answer.clone());
    Ok(answer)
}

/// One `BootToken` call; the error is the HTTP answer (and a refusal at this epoch stops the
/// vouching).
async fn ask_boot_token(
    shared: &SiteShared,
    agent: &SiteAgent,
    mac: &str,
    epoch: u64,
) -> Result<proto::BootTokenResponse, HttpResponse> {
    let mut client = agent.client.clone();
    let retry = || HttpResponse::text(502, "the control plane could not be asked; retry\n");
    let (client_time_ms, signature) =
        agent.prove(SiteCall::boot_token(mac, epoch)).map_err(|e| {
            site_log(format_args!("boot script for {mac}: {e}"));
            retry()
        })?;
    let ask = proto::BootTokenRequest {
        mac: mac.to_owned(),
        lease_epoch: epoch,
        client_time_ms,
        signature,
    };
    match tokio::time::timeout(BOOT_TOKEN_TIMEOUT, client.boot_token(ask)).await {
        Ok(Ok(answer)) => Ok(answer.into_inner()),
        Ok(Err(status)) if status.code() == tonic::Code::NotFound => {
            site_log(format_args!("boot script for {mac}: no boot entry"));
            Err(HttpResponse::text(
                404,
                &format!("no boot entry for {mac} at this site\n"),
            ))
        }
        Ok(Err(status)) if status.code() == tonic::Code::FailedPrecondition => {
            site_log(format_args!(
                "boot script for {mac} refused by the control plane: {}; not vouching at epoch {epoch}",
                describe_status(&status)
            ));
            shared.drop_epoch(epoch);
            Err(not_held())
        }
        Ok(Err(status)) => {
            site_log(format_args!(
                "boot script for {mac}: BootToken failed: {}",
                describe_status(&status)
            ));
            Err(retry())
        }
        Err(_) => {
            site_log(format_args!(
                "boot script for {mac}: BootToken took more than {} s",
                BOOT_TOKEN_TIMEOUT.as_secs()
            ));
            Err(retry())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        let q = parse_query("mac=AA%3ABB%3Acc%3Add%3Aee%3Aff&uuid=&ip=10.0.0.7").unwrap();
        assert_eq!(q.mac, "aa:bb:cc:dd:ee:ff");
        assert_eq!(q.uuid, None);
        assert_eq!(q.ip.as_deref(), Some("10.0.0.7"));
        assert!(parse_query("uuid=x").unwrap_err().starts_with("no mac="));
        assert_eq!(
            parse_query("mac=zz").unwrap_err(),
            "mac=\"zz\" is not a MAC address (six hex pairs)"
        );
        assert!(parse_query("mac=aa:bb:cc:dd:ee:ff&ip=nope").is_err());
    }

    #[test]
    fn scripts() {
        let entry = proto::BootTokenResponse {
            kernel_url: "http://k/vmlinuz".into(),
            initrd_url: "http://k/initrd".into(),
            kernel_args: "".into(),
            token: "bcjt_x".into(),
            ..Default::default()
        };
        assert_eq!(
            render_script(&entry, "AAA"),
            "#!ipxe\nkernel http://k/vmlinuz bc.token=bcjt_x bc.assertion=AAA\ninitrd http://k/initrd\nboot\n"
        );
    }
}
