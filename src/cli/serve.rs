//! `serve`, and `demo`, which prepares a mailing and serves it.

use super::args::secrets::check_secret;
use super::args::serve::{DemoArgs, ServeArgs};
use super::args::webhooks::OutboundArgs;
use super::connect::live_layer;
use crate::outbound::Outbound;
use crate::store;
use anyhow::Context;
use std::time::Duration;

/// `linktrack serve`: refuses a placeholder or short secret before anything
/// starts (a compose file's `change-me` must not reach production).
pub(super) async fn serve(url: &str, args: &ServeArgs) -> anyhow::Result<()> {
    check_secret("LINKTRACK_SECRET", args.seal.current.secret.as_deref())?;
    args.api.check()?;
    check_secret("LINKTRACK_ADMIN_TOKEN", args.admin_token.as_deref())?;
    run_server(url, args, false).await
}

/// The `--geoip` database, read whole before the server starts: a file
/// that is missing or not a MaxMind DB stops `serve` with its name.
fn open_geoip(
    path: Option<&std::path::Path>,
) -> anyhow::Result<Option<std::sync::Arc<crate::server::geoip::GeoIp>>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let geoip = crate::server::geoip::GeoIp::open(path).context("--geoip")?;
    tracing::info!(?geoip, "GeoIP database loaded: events record a country");
    Ok(Some(std::sync::Arc::new(geoip)))
}

/// `demo`: its image proxy may fetch the demo's pictures from loopback.
async fn run_server(url: &str, args: &ServeArgs, demo: bool) -> anyhow::Result<()> {
    use crate::journal::segments::JournalSettings;
    use crate::server::{state::ServerSettings, App, AppSettings};
    let pool_settings = store::PoolSettings {
        max_connections: args.db_connections,
        acquire_timeout: Duration::from_millis(args.db_timeout_ms),
    };
    // Connect lazily: the server starts (pixels, journal, health) even while
    // the database is down, and catches up once it is back.
    let pool = store::connect_lazy(url, &pool_settings)?;
    let base_url = args.base_url();
    // Every webhook endpoint's host resolved and checked before anything
    // starts; the senders check again at each connection.
    let outbound = Outbound::from_settings(&args.outbound.settings())?;
    outbound.check_destinations().await?;
    let settings = AppSettings {
        server: ServerSettings {
            keep_days: args.keep_days,
            base_url: base_url.clone(),
            db_timeout: pool_settings.acquire_timeout,
            trust_forwarded_for: args.trust_forwarded_for,
            well_known_dir: args.well_known_dir.clone(),
            geoip: open_geoip(args.geoip.as_deref())?,
            lookups_in_flight: args.lookups_in_flight as usize,
            images: demo_image_settings(demo),
            bots: demo_bot_rules(demo),
            hooks: args.hooks.settings()?,
            ..ServerSettings::default()
        },
        api_token: args.api.api_token.clone(),
        api_key_secret: args.api.api_key_secret.clone(),
        secret: args.seal.current.secret.clone(),
        previous_secrets: args.seal.secrets()?.previous,
        new_secret: args.seal.current.new_secret,
        bounce_domain: args.bounce_domain.clone(),
        live: live_layer(&args.live)?,
        rollup_every: (args.rollup_every > 0).then(|| Duration::from_secs(args.rollup_every)),
        rollup: crate::store::rollup::RollupOptions {
            verdicts: std::sync::Arc::new(demo_verdict_rules(args.verdicts.rules()?, demo)),
            ..Default::default()
        },
        admin_listen: Some(args.admin_listen),
        admin_token: args.admin_token.clone(),
        connections: crate::server::listen::ConnectionLimits {
            header_timeout: Duration::from_secs(args.header_timeout),
            max_connections: args.max_connections,
            ..Default::default()
        },
        outbound: hold_until_settled(outbound, args),
        tls: args.tls.settings(),
        ..AppSettings::new(
            pool,
            JournalSettings {
                min_free_bytes: args.journal_min_free_bytes,
                resume_free_bytes: args.journal_resume_free_bytes,
                ..JournalSettings::new(&args.journal)
            },
        )
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let app = App::build(settings, listener)
        .await
        .context("starting the server")?;
    tracing::info!(
        listen = %app.local_addr()?,
        // The bound address: with port 0 the port is only known here.
        admin = %app.admin_addr().unwrap_or(args.admin_listen),
        base_url = %base_url,
        base_url_from = if args.base_url.is_some() { "--base-url" } else { "--listen" },
        workers = ?app.worker_names(),
        "serving"
    );
    app.run(crate::server::shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Clicks and opens go out once their verdict settled (the settle time of
/// the verdicts, the safety net of the outbound settings).
fn hold_until_settled(outbound: Outbound, args: &ServeArgs) -> Outbound {
    let hold = crate::outbound::Hold {
        settle: args.verdicts.settle(),
        ..outbound.hold
    };
    outbound.holding(hold)
}

pub(super) async fn demo(url: &str, args: &DemoArgs) -> anyhow::Result<()> {
    let base_url = args
        .base_url
        .clone()
        .unwrap_or_else(|| super::args::serve::base_url_for_listen(args.listen));
    // One secret for the builder and the server: it keys the token seal
    // (docs/token.md) as well as the dashboard's login cookies. Kept across
    // runs: the printed links must open on this server, and a rerun reuses
    // the links stored by the last (a fresh secret for the builder and
    // another for the server made every printed link 404).
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let (secret, new_secret) = match std::env::var("LINKTRACK_SECRET") {
        Ok(secret) => (secret, false),
        Err(_) => demo_secret(&args.dir, args.new_token)?,
    };
    // The fixture's pictures come from a stand-in CDN on a loopback port,
    // so the proxied image shows a picture; the same port as last time, so
    // the image links of earlier runs keep working.
    let cdn = demo_cdn_listener(&args.dir).await?;
    let cdn_base = format!("http://{}", cdn.local_addr()?);
    let seal = crate::demo::DemoSeal {
        secret: Some(&secret),
        new_secret,
    };
    let outcome = crate::demo::prepare(url, &base_url, Some(&cdn_base), &args.dir, seal).await?;
    print_outcome(&outcome, args);
    if args.no_serve {
        return Ok(());
    }
    // The dashboard needs a token; the demo makes one once and keeps it in
    // its directory, so a bookmark or a browser's login survives a rerun.
    let api_token = match &args.api_token {
        Some(token) => token.clone(),
        None => saved_random_hex(&args.dir.join("dashboard-token"), args.new_token)?,
    };
    println!(
        "  the dashboard: http://{}/login (token {api_token}), then /mailings",
        args.listen
    );
    let serve_args = demo_serve_args(args, base_url, api_token, secret).await?;
    crate::demo::deliver_now(url, &outcome).await?;
    let cdn = tokio::spawn(crate::server::serve_demo_images(cdn));
    let served = run_server(url, &serve_args, true).await;
    cdn.abort();
    served
}

/// Where the demo's stand-in CDN listens: the port saved in
/// `DIR/cdn-port` by an earlier run when it is free, else a free one
/// (saved for the next run; earlier runs' image links then answer 502).
async fn demo_cdn_listener(dir: &std::path::Path) -> anyhow::Result<tokio::net::TcpListener> {
    use std::net::Ipv4Addr;
    let path = dir.join("cdn-port");
    let saved: Option<u16> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| text.trim().parse().ok());
    if let Some(port) = saved.filter(|port| *port != 0) {
        match tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await {
            Ok(listener) => return Ok(listener),
            Err(err) => println!(
                "  the demo's pictures moved: port {port} is taken ({err}); the image links of \
                 earlier runs answer 502"
            ),
        }
    }
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .context("listening for the demo's pictures")?;
    let port = listener.local_addr()?.port();
    std::fs::write(&path, format!("{port}\n"))
        .with_context(|| format!("saving {}", path.display()))?;
    Ok(listener)
}

/// What the demo built, and the links to open (served or not).
fn print_outcome(outcome: &crate::demo::DemoOutcome, args: &DemoArgs) {
    println!("{}", outcome.summary);
    println!("letters: {}", outcome.letters.display());
    if let Some(dir) = outcome.letters.parent() {
        println!(
            "rejected and suppressed recipients, with line and reason: {}",
            dir.join("rejects.jsonl").display()
        );
    }
    if args.no_serve {
        for (label, link) in &outcome.sample_urls {
            println!("{label}: {link}");
        }
        return;
    }
    println!(
        "serving on http://{} (Ctrl-C to stop); open these:",
        args.listen
    );
    for (label, link) in &outcome.sample_urls {
        println!("  {label}: {link}");
    }
}

/// `serve`'s settings for the demo: its directory's journal, its secret
/// and dashboard token, verdicts at once, Redis when one answers, events
/// out as the environment says.
async fn demo_serve_args(
    args: &DemoArgs,
    base_url: String,
    api_token: String,
    secret: String,
) -> anyhow::Result<ServeArgs> {
    Ok(ServeArgs {
        listen: args.listen,
        admin_listen: args.admin_listen,
        admin_token: None,
        base_url: Some(base_url),
        keep_days: crate::store::partitions::DEFAULT_KEEP_DAYS,
        journal: args.dir.join("journal"),
        journal_min_free_bytes: crate::journal::segments::DEFAULT_MIN_FREE_BYTES,
        journal_resume_free_bytes: crate::journal::segments::DEFAULT_RESUME_FREE_BYTES,
        db_timeout_ms: 1500,
        db_connections: 16,
        lookups_in_flight: crate::server::lookups::DEFAULT_IN_FLIGHT as u32,
        header_timeout: crate::server::listen::DEFAULT_HEADER_TIMEOUT.as_secs(),
        max_connections: crate::server::listen::DEFAULT_MAX_CONNECTIONS,
        trust_forwarded_for: false,
        well_known_dir: None,
        tls: super::args::serve::TlsArgs {
            tls_listen: None,
            acme_directory: None,
            acme_ca_file: None,
            acme_contact: None,
            acme_renew_before_days: None,
            acme_check_secs: crate::acme::DEFAULT_CHECK_EVERY.as_secs(),
        },
        geoip: None,
        api: super::args::keys::ApiAccessArgs {
            api_token: Some(api_token),
            api_key_secret: None,
        },
        bounce_domain: None,
        seal: super::args::secrets::RingArgs {
            current: super::args::secrets::SecretArgs {
                secret: Some(secret),
                new_secret: false,
            },
            previous_secrets: None,
            previous_secrets_file: Some(args.dir.join(DEMO_PREVIOUS_SECRETS))
                .filter(|path| path.exists()),
        },
        rollup_every: 2,
        // The demo's clicks show within seconds.
        verdicts: super::args::serve::VerdictArgs {
            verdict_settle_secs: 0,
            bot_networks: None,
        },
        live: super::args::serve::LiveArgs {
            redis_url: demo_redis_url().await,
            redis_prefix: crate::live::DEFAULT_PREFIX.to_owned(),
        },
        outbound: outbound_from_env()?,
        // The demo takes no provider webhooks.
        hooks: super::args::serve::ProviderHookArgs {
            ses_topic_arns: Vec::new(),
            sns_cert_url_prefixes: Vec::new(),
            mailgun_signing_key: None,
            mailgun_max_age: crate::server::hooks::DEFAULT_MAILGUN_MAX_AGE.as_secs(),
            soft_bounces: crate::bounces::SoftPolicy::default().count,
            soft_days: crate::bounces::SoftPolicy::default().days,
        },
    })
}

/// The demo's letters are "delivered" as it starts serving and its
/// reader clicks the printed links soon after: a click counts as a bot's
/// (`too_fast`) only within [`crate::demo::DEMO_MIN_CLICK_DELAY`].
fn demo_bot_rules(demo: bool) -> crate::bots::BotRules {
    let rules = crate::bots::BotRules::default();
    if demo {
        crate::bots::BotRules {
            min_click_delay: crate::demo::DEMO_MIN_CLICK_DELAY,
            ..rules
        }
    } else {
        rules
    }
}

fn demo_verdict_rules(
    rules: crate::bots::letter_judgement::VerdictRules,
    demo: bool,
) -> crate::bots::letter_judgement::VerdictRules {
    if demo {
        crate::bots::letter_judgement::VerdictRules {
            min_click_delay: crate::demo::DEMO_MIN_CLICK_DELAY,
            ..rules
        }
    } else {
        rules
    }
}

/// The image proxy's settings. `serve` fetches public addresses only; the
/// demo's letters show pictures from its stand-in CDN on loopback, so the
/// demo's proxy may also fetch loopback. Its stored image URLs come from
/// the compiled-in fixtures only.
fn demo_image_settings(demo: bool) -> crate::server::image::ImageSettings {
    use crate::server::image::{AddressPolicy, ImageSettings};
    let policy = if demo {
        AddressPolicy::AllowLoopback
    } else {
        AddressPolicy::PublicOnly
    };
    ImageSettings {
        policy,
        ..ImageSettings::default()
    }
}

/// The demo shows everything: the live layer is on when `REDIS_URL` is set
/// or a Redis on the default port answers, and it says which.
async fn demo_redis_url() -> Option<String> {
    if let Ok(url) = std::env::var("REDIS_URL") {
        println!("  live layer (latest clicks, live counters): Redis at REDIS_URL");
        return Some(url);
    }
    let url = super::args::serve::DEFAULT_DEMO_REDIS_URL;
    let answers = match crate::live::Live::new(url, crate::live::DEFAULT_PREFIX) {
        Ok(live) => tokio::time::timeout(std::time::Duration::from_secs(1), live.ping())
            .await
            .unwrap_or(false),
        Err(_) => false,
    };
    if answers {
        println!("  live layer (latest clicks, live counters): Redis at {url}");
        Some(url.to_owned())
    } else {
        println!("  live layer off: no Redis answered at {url} (set REDIS_URL to use one)");
        None
    }
}

/// The outbound settings of the environment alone (the demo has no flags
/// for them): LINKTRACK_WEBHOOK_URL and the rest, with their defaults.
fn outbound_from_env() -> anyhow::Result<OutboundArgs> {
    use clap::{Args, FromArgMatches};
    let command = OutboundArgs::augment_args(clap::Command::new("linktrack"));
    let matches = command.try_get_matches_from(["linktrack"])?;
    Ok(OutboundArgs::from_arg_matches(&matches)?)
}

/// Where the demo keeps its secret (the seal key's and the login
/// cookies'), and the secrets `--new-token` replaced: the demo's server
/// opens the tokens of earlier runs with them (its key ring).
const DEMO_SECRET: &str = "cookie-key";
const DEMO_PREVIOUS_SECRETS: &str = "previous-secrets";

/// The demo's secret, and whether it is new (made now): a replaced one
/// goes to the ring's file.
fn demo_secret(dir: &std::path::Path, renew: bool) -> anyhow::Result<(String, bool)> {
    let path = dir.join(DEMO_SECRET);
    let before = read_saved_hex(&path);
    if let (Some(saved), false) = (&before, renew) {
        return Ok((saved.clone(), false));
    }
    let made = saved_random_hex(&path, true)?;
    if let Some(old) = before {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let ring = dir.join(DEMO_PREVIOUS_SECRETS);
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&ring)
            .and_then(|mut file| writeln!(file, "{old}"))
            .with_context(|| format!("saving {}", ring.display()))?;
    }
    Ok((made, true))
}

/// The 128-bit hex value saved in `path`, if it holds one.
fn read_saved_hex(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let saved = text.trim();
    (saved.len() == 32 && saved.bytes().all(|b| b.is_ascii_hexdigit())).then(|| saved.to_owned())
}

/// The 128-bit hex value saved in `path`, made (and saved) when the file is
/// missing, unreadable as one, or `renew` is set.
fn saved_random_hex(path: &std::path::Path, renew: bool) -> anyhow::Result<String> {
    if let (Some(saved), false) = (read_saved_hex(path), renew) {
        return Ok(saved);
    }
    let made = random_hex();
    // Readable by its owner only: the token opens the dashboard.
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(format!("{made}\n").as_bytes()))
        .with_context(|| format!("saving {}", path.display()))?;
    Ok(made)
}

/// 128 random bits as hex: the demo's API token and cookie key.
fn random_hex() -> String {
    use rand::Rng;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::{demo_cdn_listener, demo_secret, saved_random_hex};

    #[tokio::test]
    async fn the_demo_cdn_keeps_its_port_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let first = demo_cdn_listener(dir.path()).await.unwrap();
        let port = first.local_addr().unwrap().port();
        drop(first);
        let again = demo_cdn_listener(dir.path()).await.unwrap();
        assert_eq!(again.local_addr().unwrap().port(), port);
        // Taken (the first still listening): another port, saved.
        let moved = demo_cdn_listener(dir.path()).await.unwrap();
        let other = moved.local_addr().unwrap().port();
        assert_ne!(other, port);
        let saved = std::fs::read_to_string(dir.path().join("cdn-port")).unwrap();
        assert_eq!(saved.trim(), other.to_string());
    }

    #[test]
    fn a_new_demo_secret_keeps_the_old_one_in_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let (first, new) = demo_secret(dir.path(), false).unwrap();
        assert!(new, "the first run makes the secret");
        assert_eq!(
            demo_secret(dir.path(), false).unwrap(),
            (first.clone(), false)
        );
        let (second, new) = demo_secret(dir.path(), true).unwrap();
        assert!(new && second != first);
        let ring = std::fs::read_to_string(dir.path().join("previous-secrets")).unwrap();
        assert_eq!(ring.trim(), first);
    }
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_demo_token_stays_the_same_across_runs_unless_renewed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dashboard-token");
        let first = saved_random_hex(&path, false).unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(saved_random_hex(&path, false).unwrap(), first);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the token file is readable by others");
        let renewed = saved_random_hex(&path, true).unwrap();
        assert_ne!(renewed, first);
        assert_eq!(saved_random_hex(&path, false).unwrap(), renewed);
        std::fs::write(&path, "not a token\n").unwrap();
        assert_ne!(saved_random_hex(&path, false).unwrap(), "not a token");
    }
}
