//! `bcctl serve`: resolves the configuration and runs the role it names: everything in one
//! process ([`crate::serve::start`]), or the api or the gateway alone ([`crate::serve::split`]).

use crate::serve::error::ServeError;
use crate::serve::start::{init_logging, resolve, start, until_stopped, Role, ServeArgs};

pub async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let settings = resolve(&args)?;
    init_logging(settings.log_format);
    match settings.role {
        Role::All => {}
        Role::Api => return crate::serve::split::serve_api(&settings).await,
        Role::Gateway => return crate::serve::split::serve_gateway(&settings).await,
    }
    let mut started = start(&settings).await?;
    eprintln!(
        "bcctl serve: listening on {} (metrics {})",
        started.running.addr,
        started
            .running
            .metrics_addr
            .map_or("off".to_string(), |a| format!("http://{a}/metrics"))
    );
    if let Some(admin) = &started.admin {
        eprintln!(
            "bcctl serve: admin API on {} (mTLS, operator certificates)",
            admin.addr
        );
    }
    until_stopped(&mut started.running).await?;
    tracing::info!("stopping");
    started.shutdown().await;
    Ok(())
}
