//! Event types of `proto/bc/events/v1/ssh.proto`.

use super::*;

event_payload! {
    SshUserCertIssued => "ssh.user_cert.issued", version 1;
    SshUserCertRevoked => "ssh.user_cert.revoked", version 1;
}

/// The stream of one SSH certificate: `ssh-cert/<serial>` (decimal).
pub fn ssh_cert_stream(serial: u64) -> String {
    format!("ssh-cert/{serial}")
}
