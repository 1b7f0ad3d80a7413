//! The admin API (`bc.admin.v1.AdminService`): the client side here (`client`, `profile`,
//! `remote`) and the per-verb file table both sides share (`files`).

pub mod client;
pub mod files;
pub mod profile;
pub mod remote;
