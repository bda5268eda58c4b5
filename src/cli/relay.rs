//! `linktrack relay`: the flags made into the relay's settings, then the
//! relay run until Ctrl-C or SIGTERM.

use super::args::relay::{Forward, RelayArgs, Suppressed};
use super::args::secrets::check_secret;
use super::connect::pool;
use crate::relay::{self, RelaySettings, SuppressedAction};

pub(super) async fn relay(url: &str, args: &RelayArgs) -> anyhow::Result<()> {
    check_secret("LINKTRACK_SECRET", args.seal.secret.as_deref())?;
    args.api.check()?;
    let pool = pool(url).await?;
    let smtp = args
        .smtp_sessions
        .settings(args.smtp.clone().unwrap_or_default());
    let retry_after = smtp.backoff;
    let settings = RelaySettings {
        listen: args.listen,
        hostname: args.hostname.clone(),
        smtp,
        pools: args.pools.clone(),
        default_pool: args.pool.clone(),
        open_to: args.relay_open_to.clone(),
        api_token: args.api.api_token.clone(),
        api_key_secret: args.api.api_key_secret.clone(),
        spool: args.spool.clone(),
        forward_now: args.forward == Forward::Now,
        metrics_listen: args.metrics_listen,
        max_message_bytes: args.max_message_bytes,
        max_recipients: args.max_recipients.max(1),
        default_mailing: args.default_mailing.clone(),
        suppressed: match args.suppressed {
            Suppressed::Refuse => SuppressedAction::Refuse,
            Suppressed::Drop => SuppressedAction::Drop,
        },
        base_url: args.tracking.base_url.clone(),
        bounce_domain: args.bounce_domain.clone(),
        secret: args.seal.secret.clone(),
        retry_after,
        tls: relay::RelayTls {
            files: args.tls_cert.clone().zip(args.tls_key.clone()),
            from_domains: args.tls_from_domains,
        },
        dkim_keys: args.dkim_key.clone(),
        privacy: crate::privacy::PrivacySettings::default(),
    };
    relay::run(pool, settings, stop_signal()).await?;
    Ok(())
}

/// Ctrl-C or SIGTERM (what is queued stays in the spool for the next start).
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
