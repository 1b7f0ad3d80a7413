//! How far issued certificates start in the past: one constant the root, the CAs and the
//! leaves share (docs/DECISIONS.md, "Certificates are backdated a little").

use time::Duration;

/// How far before `now` a certificate's notBefore is put (never before its issuer's), so that
/// a peer whose clock runs a little behind does not see it as not yet valid.
pub const BACKDATE: Duration = Duration::minutes(5);
