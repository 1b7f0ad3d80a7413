//! What a joining machine says about itself so an operator can recognise it (spec 002 "What the
//! join does", step 3: hostname, serials, GPU UUIDs, boot id and the daemon version; issue 45).
//!
//! A claim stays a claim: nothing here is compared with anything, binds a node or admits a join.
//! It is recorded in `node.joined` exactly as sent, so the only rule is a bound on what is
//! recorded: each text at most [`MAX_CLAIM_BYTES`] bytes and free of control characters (an
//! operator's terminal prints it), at most [`MAX_GPU_UUIDS`] GPU UUIDs. A join over a bound is
//! refused with its own reason rather than truncated, so what the log holds is always what the
//! machine sent; bcd leaves out (empty) a value it read over the bound, so a real machine never
//! meets the refusal.

use events::schema::SelfReport as SelfReportEvent;

/// The longest text claim recorded, in bytes (a hostname is at most 64 under Linux; SMBIOS
/// serials are short strings).
pub const MAX_CLAIM_BYTES: usize = 128;

/// The most GPU UUIDs a join may claim.
pub const MAX_GPU_UUIDS: usize = 64;

/// What a machine says about itself. Empty text: not readable on that machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelfReport {
    /// The kernel's hostname.
    pub hostname: String,
    /// SMBIOS system serial.
    pub product_serial: String,
    /// SMBIOS baseboard serial.
    pub board_serial: String,
    /// SMBIOS chassis serial.
    pub chassis_serial: String,
    /// GPU UUIDs as the driver names them.
    pub gpu_uuids: Vec<String>,
    /// The kernel's boot id (new at every boot).
    pub boot_id: String,
    /// The daemon's version.
    pub agent_version: String,
}

/// Why a self-report is refused (the join's `join:<reason>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelfReportRefusal {
    /// A text over [`MAX_CLAIM_BYTES`].
    TooLong {
        /// The claim (`hostname`, `product_serial`, ..., `gpu_uuids`).
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// A text holding a control character.
    NotPrintable {
        /// The claim.
        field: &'static str,
    },
    /// More than [`MAX_GPU_UUIDS`] GPU UUIDs.
    TooMany {
        /// How many were sent.
        count: usize,
    },
}

impl SelfReportRefusal {
    /// The refusal reason, recorded as `join:<reason>`.
    pub fn reason(&self) -> &'static str {
        match self {
            SelfReportRefusal::TooLong { .. } => "claim-too-long",
            SelfReportRefusal::NotPrintable { .. } => "claim-not-printable",
            SelfReportRefusal::TooMany { .. } => "claim-too-many",
        }
    }
}

impl std::fmt::Display for SelfReportRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelfReportRefusal::TooLong { field, len } => write!(
                f,
                "the {field} claim is {len} bytes, over the {MAX_CLAIM_BYTES} recorded"
            ),
            SelfReportRefusal::NotPrintable { field } => {
                write!(f, "the {field} claim holds a control character")
            }
            SelfReportRefusal::TooMany { count } => write!(
                f,
                "{count} GPU UUIDs claimed, over the {MAX_GPU_UUIDS} recorded"
            ),
        }
    }
}

/// Whether `text` may be recorded as a claim: at most [`MAX_CLAIM_BYTES`] bytes, no control
/// character. bcd uses the same rule to leave out what it would be refused for.
pub fn claim_text_ok(text: &str) -> bool {
    text.len() <= MAX_CLAIM_BYTES && !text.chars().any(char::is_control)
}

fn check_text(field: &'static str, text: &str) -> Result<(), SelfReportRefusal> {
    if text.len() > MAX_CLAIM_BYTES {
        return Err(SelfReportRefusal::TooLong {
            field,
            len: text.len(),
        });
    }
    if text.chars().any(char::is_control) {
        return Err(SelfReportRefusal::NotPrintable { field });
    }
    Ok(())
}

impl SelfReport {
    /// Checks the bounds on what is recorded.
    pub fn check(&self) -> Result<(), SelfReportRefusal> {
        if self.gpu_uuids.len() > MAX_GPU_UUIDS {
            return Err(SelfReportRefusal::TooMany {
                count: self.gpu_uuids.len(),
            });
        }
        check_text("hostname", &self.hostname)?;
        check_text("product_serial", &self.product_serial)?;
        check_text("board_serial", &self.board_serial)?;
        check_text("chassis_serial", &self.chassis_serial)?;
        check_text("boot_id", &self.boot_id)?;
        check_text("agent_version", &self.agent_version)?;
        for uuid in &self.gpu_uuids {
            check_text("gpu_uuids", uuid)?;
        }
        Ok(())
    }

    /// As `node.joined` records it.
    pub fn to_event(&self) -> SelfReportEvent {
        SelfReportEvent {
            hostname: self.hostname.clone(),
            product_serial: self.product_serial.clone(),
            board_serial: self.board_serial.clone(),
            chassis_serial: self.chassis_serial.clone(),
            gpu_uuids: self.gpu_uuids.clone(),
            boot_id: self.boot_id.clone(),
            agent_version: self.agent_version.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> SelfReport {
        SelfReport {
            hostname: "rack4-node17.example".into(),
            product_serial: "SN-0001".into(),
            board_serial: "BRD-77".into(),
            chassis_serial: "CH-9".into(),
            gpu_uuids: vec!["GPU-5f6e7d8c-0000-1111-2222-333344445555".into()],
            boot_id: "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c".into(),
            agent_version: "0.1.0".into(),
        }
    }

    #[test]
    fn a_report_within_the_bounds_passes_and_is_recorded_as_sent() {
        let r = full();
        assert_eq!(r.check(), Ok(()));
        assert_eq!(SelfReport::default().check(), Ok(()));
        let at_bound = SelfReport {
            hostname: "h".repeat(MAX_CLAIM_BYTES),
            gpu_uuids: vec!["GPU-x".into(); MAX_GPU_UUIDS],
            ..full()
        };
        assert_eq!(at_bound.check(), Ok(()));
        let e = r.to_event();
        assert_eq!(e.hostname, r.hostname);
        assert_eq!(e.product_serial, r.product_serial);
        assert_eq!(e.board_serial, r.board_serial);
        assert_eq!(e.chassis_serial, r.chassis_serial);
        assert_eq!(e.gpu_uuids, r.gpu_uuids);
        assert_eq!(e.boot_id, r.boot_id);
        assert_eq!(e.agent_version, r.agent_version);
    }

    #[test]
    fn a_text_over_the_bound_is_refused_claim_too_long() {
        let r = SelfReport {
            board_serial: "s".repeat(MAX_CLAIM_BYTES + 1),
            ..full()
        };
        let refusal = r.check().unwrap_err();
        assert_eq!(refusal.reason(), "claim-too-long");
        assert_eq!(
            refusal,
            SelfReportRefusal::TooLong {
                field: "board_serial",
                len: MAX_CLAIM_BYTES + 1
            }
        );
        assert_eq!(
            refusal.to_string(),
            "the board_serial claim is 129 bytes, over the 128 recorded"
        );
    }

    #[test]
    fn a_control_character_is_refused_claim_not_printable() {
        let r = SelfReport {
            hostname: "node\u{1b}[2J".into(),
            ..full()
        };
        let refusal = r.check().unwrap_err();
        assert_eq!(refusal.reason(), "claim-not-printable");
        assert_eq!(
            refusal,
            SelfReportRefusal::NotPrintable { field: "hostname" }
        );
        assert!(!claim_text_ok("a\nb"));
        assert!(claim_text_ok("nœud-1"));
    }

    #[test]
    fn too_many_gpu_uuids_are_refused_claim_too_many() {
        let r = SelfReport {
            gpu_uuids: vec!["GPU-x".into(); MAX_GPU_UUIDS + 1],
            ..full()
        };
        let refusal = r.check().unwrap_err();
        assert_eq!(refusal.reason(), "claim-too-many");
        assert_eq!(refusal, SelfReportRefusal::TooMany { count: 65 });
    }
}
