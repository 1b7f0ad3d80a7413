//! How a configuration error ([`ConfigError`]) becomes the error of the commands that resolve a
//! configuration (`bcctl serve`'s [`ServeError`], `bcctl up`'s [`UpError`]), with the same text.
//!
//! A file of its own so that `serve_config` needs nothing of `serve_cmd` (which uses it): no
//! import circle. Once `ServeError` wraps `ConfigError` itself (a `#[from]` variant in
//! `serve_cmd`), this file goes.

use crate::serve_cmd::ServeError;
use crate::serve_config::ConfigError;
use crate::up_cmd::UpError;

impl From<ConfigError> for ServeError {
    fn from(e: ConfigError) -> Self {
        match e {
            ConfigError::ReadConfig { path, source } => ServeError::ReadConfig { path, source },
            ConfigError::ConfigSyntax { path, message } => {
                ServeError::ConfigSyntax { path, message }
            }
            ConfigError::Invalid { key, message } => ServeError::Invalid { key, message },
        }
    }
}

impl From<ConfigError> for UpError {
    fn from(e: ConfigError) -> Self {
        UpError::Serve(e.into())
    }
}
