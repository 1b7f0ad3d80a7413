//! `feed.lag`: the gateway's revocation feed, read from its Prometheus endpoint.
//!
//! The feed lives in the gateway's memory: it tails the log (the exact tailer) and is caught up
//! whenever a tail step comes back short of a page. The projections it reads (`node_certs`) are
//! written inline, in the transaction of the event, so they are never behind the log; what can
//! lag is the feed itself. The gateway publishes `bc_revocation_feed_lag_seconds` (time since it
//! was last caught up), `bc_revocation_feed_stale` (behind by more than `feed_max_lag`: new
//! sessions are refused) and `bc_revocation_feed_halted` (stopped at a revocation it cannot
//! read); doctor reads those three.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::finding::{Finding, Level};

/// How long doctor waits for the metrics endpoint.
const TIMEOUT: Duration = Duration::from_secs(3);

/// A lag above this (seconds) is reported as info even while the feed is not stale.
const LAG_INFO: f64 = 2.0;

/// `HOST:PORT` from `HOST:PORT` or `http://HOST:PORT[/metrics]`.
pub fn metrics_addr(text: &str) -> Option<String> {
    let rest = text.strip_prefix("http://").unwrap_or(text);
    let host_port = rest.split('/').next()?;
    (!host_port.is_empty() && host_port.contains(':')).then(|| host_port.to_string())
}

async fn scrape(addr: &str) -> Result<String, String> {
    let fetch = async {
        let mut tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        tcp.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .map_err(|e| format!("cannot send the request: {e}"))?;
        let mut body = Vec::new();
        tcp.read_to_end(&mut body)
            .await
            .map_err(|e| format!("cannot read the answer: {e}"))?;
        Ok::<_, String>(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(TIMEOUT, fetch)
        .await
        .map_err(|_| format!("no answer within {} s", TIMEOUT.as_secs()))?
}

/// The value of the sample `name` (no labels) in a Prometheus text exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok())?
    })
}

/// `feed.lag` from the gateway at `addr` (`None`: no address known).
pub async fn check_feed(addr: Option<&str>, findings: &mut Vec<Finding>) {
    let Some(addr) = addr else {
        findings.push(
            Finding::new(
                "feed.lag",
                Level::Info,
                "not checked: no gateway metrics endpoint is configured (metrics_listen is off)",
            )
            .fix("bcctl doctor --metrics HOST:PORT (the gateway's metrics_listen)"),
        );
        return;
    };
    let text = match scrape(addr).await {
        Ok(t) => t,
        Err(e) => {
            findings.push(
                Finding::new(
                    "feed.lag",
                    Level::Info,
                    format!("not checked: the gateway's metrics at http://{addr}/metrics: {e}"),
                )
                .fix("run bcctl doctor where the gateway runs, or pass --metrics HOST:PORT (its metrics_listen)"),
            );
            return;
        }
    };
    let (Some(lag), Some(stale), Some(halted)) = (
        sample(&text, "bc_revocation_feed_lag_seconds"),
        sample(&text, "bc_revocation_feed_stale"),
        sample(&text, "bc_revocation_feed_halted"),
    ) else {
        findings.push(Finding::new(
            "feed.lag",
            Level::Info,
            format!("not checked: http://{addr}/metrics has no bc_revocation_feed_* samples (not a bcctl gateway?)"),
        ));
        return;
    };
    let finding = if halted >= 1.0 {
        Finding::new(
            "feed.lag",
            Level::Error,
            format!("the gateway's revocation feed has stopped at a revocation it cannot read ({lag:.1} s ago); every node session is refused"),
        )
        .fix("upgrade bcctl if its log names an event from a newer control plane, then restart bcctl serve")
    } else if stale >= 1.0 {
        Finding::new(
            "feed.lag",
            Level::Warning,
            format!("the gateway's revocation feed is behind: last caught up {lag:.1} s ago, beyond feed_max_lag; new node sessions are refused"),
        )
        .fix("check the database's load and the gateway's log; it recovers by itself once it catches up")
    } else if lag > LAG_INFO {
        Finding::new(
            "feed.lag",
            Level::Info,
            format!("the gateway's revocation feed was last caught up {lag:.1} s ago"),
        )
    } else {
        Finding::new(
            "feed.lag",
            Level::Ok,
            format!("the gateway's revocation feed is caught up ({lag:.3} s)"),
        )
    };
    findings.push(finding);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_samples() {
        assert_eq!(
            metrics_addr("http://127.0.0.1:9464/metrics").as_deref(),
            Some("127.0.0.1:9464")
        );
        assert_eq!(metrics_addr("localhost:1").as_deref(), Some("localhost:1"));
        assert_eq!(metrics_addr("nohost"), None);
        let text = "# HELP x\nbc_revocation_feed_lag_seconds 0.250\nbc_revocation_feed_stale 0\n";
        assert_eq!(sample(text, "bc_revocation_feed_lag_seconds"), Some(0.25));
        assert_eq!(sample(text, "bc_revocation_feed_stale"), Some(0.0));
        assert_eq!(sample(text, "bc_revocation_feed_halted"), None);
    }
}
