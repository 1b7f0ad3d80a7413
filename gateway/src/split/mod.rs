//! The split between a gateway and the api process (`bcctl serve --role gateway` and
//! `--role api`): the api's internal endpoint `bc.internal.v1.ApiService` ([`api`]), the
//! gateway's client of it ([`relay`]), the mutual TLS between the two ([`internal_tls`]), and
//! the gateway's internal client certificate reloaded from its files ([`internal_files`]), the
//! gateway's watch on the api's health ([`api_probe`]).
//! The api's own metrics page and health listener are [`api_watch`].
//! Join, Renew, the site agent's calls and the Welcome trust bundle cross it; so does the
//! gateway's serving certificate, issued by the api for a key the gateway made.
//!
//! A split gateway must never hold a signing key or a CA key: it relays, and the api alone
//! signs. The api must never answer a peer other than a gateway's internal certificate (serving
//! CA, `OU=bc-role:gateway`, clientAuth), never issue a serving certificate for a name that
//! certificate does not list or for longer than 7 days, and a gateway must never take another
//! gateway's serving certificate for the api's.

pub mod api;
pub mod api_probe;
pub mod api_watch;
pub mod internal_files;
pub mod internal_tls;
pub mod relay;
