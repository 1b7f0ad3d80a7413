//! Connecting to the gateway: a tonic channel over the pinned connector, with the connector's
//! own error kept when that is what failed.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use domain::pki::Pin;
use tokio_rustls::TlsConnector;
use tonic::transport::{Channel, Endpoint};

use super::connector::{GatewayAddress, PinnedConnector, CONNECT_TIMEOUT};
use super::diagnose::{error_chain, is_revoked_alert};
use super::error::ClientError;
use super::tls::{client_config, ClientIdentity};

/// The gRPC client bcd uses.
pub type NodeClient = proto::node_service_client::NodeServiceClient<Channel>;

/// How long one unary call (Join, Renew) may take.
pub const CALL_TIMEOUT: StdDuration = StdDuration::from_secs(30);

/// Connects to the gateway: pinned TLS 1.3, the node identity presented when given.
pub async fn connect(
    server: &str,
    serving_ca: Pin,
    identity: Option<&ClientIdentity>,
) -> Result<NodeClient, ClientError> {
    let address = GatewayAddress::parse(server)?;
    let tls = TlsConnector::from(Arc::new(client_config(serving_ca, identity)?));
    let endpoint = Endpoint::from_shared(format!("http://{}", address.addr))
        .map_err(|_| ClientError::BadServer(server.to_owned()))?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(StdDuration::from_secs(20))
        .keep_alive_timeout(StdDuration::from_secs(20));
    let addr = address.addr.clone();
    let channel = endpoint
        .connect_with_connector(PinnedConnector {
            address,
            tls,
            mutual: identity.is_some(),
        })
        .await
        .map_err(|e| {
            if is_revoked_alert(&e) {
                return ClientError::CertificateRevoked { addr: addr.clone() };
            }
            // Our own connector's error, when that is what failed, says it best.
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = source {
                if let Some(ours) = s.downcast_ref::<ClientError>() {
                    return match ours {
                        ClientError::Unreachable { addr, reason } => ClientError::Unreachable {
                            addr: addr.clone(),
                            reason: reason.clone(),
                        },
                        ClientError::Handshake { addr, reason } => ClientError::Handshake {
                            addr: addr.clone(),
                            reason: reason.clone(),
                        },
                        ClientError::ServerCertificate { addr, reason } => {
                            ClientError::ServerCertificate {
                                addr: addr.clone(),
                                reason: reason.clone(),
                            }
                        }
                        ClientError::CertificateRevoked { addr } => {
                            ClientError::CertificateRevoked { addr: addr.clone() }
                        }
                        other => ClientError::Connection {
                            addr: addr.clone(),
                            reason: other.to_string(),
                        },
                    };
                }
                source = s.source();
            }
            ClientError::Connection {
                addr,
                reason: error_chain(&e),
            }
        })?;
    Ok(proto::node_service_client::NodeServiceClient::new(channel))
}
