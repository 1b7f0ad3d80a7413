//! How a configuration error ([`ConfigError`]) becomes `bcctl up`'s [`UpError`], with the same
//! text (`bcctl serve`'s is in [`crate::serve_error`]).
//!
//! A file of its own so that `serve_config` needs nothing of `up_cmd`: no import circle.

use crate::serve_config::ConfigError;
use crate::up_cmd::UpError;

impl From<ConfigError> for UpError {
    fn from(e: ConfigError) -> Self {
        UpError::Serve(e.into())
    }
}
