//! How a configuration error ([`ConfigError`]) becomes `bcctl up`'s [`UpError`], with the same
//! text (`bcctl serve`'s is in [`crate::serve::error`]).
//!
//! A file of its own, under `up/`, so that `crate::serve::config` needs nothing of `up`: no import
//! circle.

use crate::serve::config::ConfigError;
use crate::up::cmd::UpError;

impl From<ConfigError> for UpError {
    fn from(e: ConfigError) -> Self {
        UpError::Serve(e.into())
    }
}
