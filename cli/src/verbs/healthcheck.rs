//! `bcctl healthcheck`: the gRPC health (`grpc.health.v1.Health/Check`) of a running
//! `bcctl serve` (or `bcctl up`) over TLS, trusting only the deployment's serving CA.
//!
//! The server is `--address HOST:PORT`, by default that of the role (`--role`, else the
//! configuration's `role`) in the configuration (`--config`, or the deployment directory's
//! `bcctl.toml`): `listen` for `all` and `gateway` (`127.0.0.1:8443` without one), the api's
//! health listener `api_health_listen` for `api` (`127.0.0.1:9444`; the internal endpoint itself
//! answers gateways only). The serving CA comes from the bundle's public half: no secret is
//! read. The gateway reports NOT_SERVING while its revocation feed is behind or stopped, the api
//! while its store does not answer. Exit 0 when SERVING; 1 otherwise, with the reason:
//! refused (nothing listens), timeout, TLS (the handshake failed: not this deployment's server),
//! or the status the server answered (NOT_SERVING, SERVICE_UNKNOWN).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tonic::transport::{Endpoint, Uri};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::command_line::failure::Failure;
use crate::deployment::{DeploymentArgs, DIR_CONFIG_FILE};
use crate::serve::config::{resolve, Role, ServeArgs};

/// How long each step (connect, handshake, the call) may take.
const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Args)]
pub struct HealthcheckArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// The server, HOST:PORT (default: the role's address in the configuration: listen for all
    /// and gateway, else 127.0.0.1:8443; api_health_listen for api, else 127.0.0.1:9444).
    #[arg(long, value_name = "HOST:PORT")]
    pub address: Option<String>,
    /// Which role's address to check when --address is not given (default: the
    /// configuration's role).
    #[arg(long, value_enum)]
    pub role: Option<Role>,
    /// The health service name to ask about ("" is the server as a whole).
    #[arg(long, default_value = "")]
    pub service: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Why the check did not find the server SERVING.
#[derive(Debug, thiserror::Error)]
pub enum HealthcheckError {
    #[error("healthcheck {server}: refused: {source} (is bcctl serve running there? pass --address HOST:PORT)")]
    Refused {
        server: String,
        source: std::io::Error,
    },
    #[error("healthcheck {server}: cannot connect: {source}")]
    Connect {
        server: String,
        source: std::io::Error,
    },
    #[error("healthcheck {server}: timeout: no answer within {} s", TIMEOUT.as_secs())]
    Timeout { server: String },
    #[error("healthcheck {server}: TLS: {why} (is it this deployment's server? its serving CA is the bundle's)")]
    Tls { server: String, why: String },
    #[error("healthcheck {server}: the health call failed: {why}")]
    Call { server: String, why: String },
    #[error("healthcheck {server}: {status}")]
    NotServing { server: String, status: String },
}

/// `--server` that is not HOST:PORT: a usage error.
fn split_server(server: &str) -> Option<(String, u16)> {
    let (host, port) = server.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse().ok()?;
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// The server this deployment's `role` listens on, from its configuration.
fn default_server(args: &DeploymentArgs, role: Option<Role>) -> Result<String, Failure> {
    let config = args.config.clone().or_else(|| {
        args.directory()
            .map(|d| d.join(DIR_CONFIG_FILE))
            .filter(|f| f.is_file())
    });
    let settings = resolve(&ServeArgs {
        config,
        role,
        ..ServeArgs::default()
    })?;
    match settings.role {
        Role::Api => settings
            .api_health_listen
            .map(|a| a.to_string())
            .ok_or_else(|| {
                Failure::usage(
                    "the api's health listener is off in the configuration (api_health_listen); pass --address HOST:PORT",
                )
            }),
        Role::All | Role::Gateway => Ok(settings.listen.to_string()),
    }
}

pub async fn run(args: HealthcheckArgs) -> Result<(), Failure> {
    let server = match &args.address {
        Some(s) => s.clone(),
        None => default_server(&args.deployment, args.role)?,
    };
    let Some((host, port)) = split_server(&server) else {
        return Err(Failure::usage(format!(
            "--address {server:?}: give HOST:PORT"
        )));
    };
    let located = args.deployment.locate()?;
    let public = located.deployment.public_half()?.public;
    let status = check(&server, &host, port, &public.serving_ca_der, &args.service).await?;
    let name = status.as_str_name();
    if status != ServingStatus::Serving {
        return Err(HealthcheckError::NotServing {
            server,
            status: name.to_string(),
        }
        .into());
    }
    if args.json {
        crate::output::print_json(&json!({
            "server": server,
            "service": args.service,
            "status": name,
        }));
    } else {
        crate::outln!("{server}: {name}");
    }
    Ok(())
}

/// Connects, handshakes (the serving CA as the only trust anchor) and asks.
async fn check(
    server: &str,
    host: &str,
    port: u16,
    serving_ca_der: &[u8],
    service: &str,
) -> Result<ServingStatus, HealthcheckError> {
    let timeout = || HealthcheckError::Timeout {
        server: server.to_string(),
    };
    let tls_err = |why: String| HealthcheckError::Tls {
        server: server.to_string(),
        why,
    };
    let tcp = tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect((host, port)))
        .await
        .map_err(|_| timeout())?
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::ConnectionRefused => HealthcheckError::Refused {
                server: server.to_string(),
                source,
            },
            _ => HealthcheckError::Connect {
                server: server.to_string(),
                source,
            },
        })?;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(serving_ca_der.to_vec()))
        .map_err(|e| tls_err(format!("the bundle's serving CA: {e}")))?;
    let mut config = rustls::ClientConfig::builder_with_provider(gateway::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| tls_err(format!("server name {host:?}: {e}")))?;
    let tls = tokio::time::timeout(
        TIMEOUT,
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| timeout())?
    .map_err(|e| tls_err(e.to_string()))?;
    // The connection is made: tonic gets it once.
    let conn = Arc::new(Mutex::new(Some(tls)));
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let taken = conn.lock().ok().and_then(|mut c| c.take());
            async move {
                taken
                    .map(TokioIo::new)
                    .ok_or_else(|| std::io::Error::other("the connection was used already"))
            }
        }))
        .await
        .map_err(|e| HealthcheckError::Call {
            server: server.to_string(),
            why: e.to_string(),
        })?;
    let answer = tokio::time::timeout(
        TIMEOUT,
        HealthClient::new(channel).check(HealthCheckRequest {
            service: service.to_string(),
        }),
    )
    .await
    .map_err(|_| timeout())?;
    match answer {
        Ok(r) => {
            Ok(ServingStatus::try_from(r.into_inner().status).unwrap_or(ServingStatus::Unknown))
        }
        Err(s) if s.code() == tonic::Code::NotFound => Ok(ServingStatus::ServiceUnknown),
        Err(s) => Err(HealthcheckError::Call {
            server: server.to_string(),
            why: format!("{:?}: {}", s.code(), s.message()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_host_and_port() {
        assert_eq!(
            split_server("127.0.0.1:8443"),
            Some(("127.0.0.1".into(), 8443))
        );
        assert_eq!(split_server("[::1]:1"), Some(("::1".into(), 1)));
        assert_eq!(split_server("localhost"), None);
        assert_eq!(split_server(":80"), None);
    }
}
