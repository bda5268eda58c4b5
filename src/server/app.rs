//! The one wiring of the server, used by `linktrack serve`, `linktrack demo`,
//! every test and every benchmark: [`App::build`] recovers the journal,
//! starts the event pipeline and the background `Workers`, binds the
//! admin listener; [`App::run`] serves until told to stop, then shuts down
//! in order.
//!
//! # Shutdown order
//! 1. Both listeners stop accepting; in-flight requests finish.
//! 2. The event pipeline flushes: the journal seals its last segment,
//!    the replayer makes a last pass into `events` (bounded by
//!    `flush_deadline`; what is left stays journaled for the next start).
//! 3. The background workers are asked to stop and joined (same bound), so
//!    a worker reading `events` sees every event of this run on its way out.

use super::api::ApiState;
use super::listen::{self, ConnectionLimits};
use super::router::public_router;
use super::serve_error::ServeError;
use super::state::{AppState, SealLoadError, ServerSettings};
use super::stats::StatsState;
use super::{handlers, metrics};
use crate::acme::{CertificateSettings, Certificates};
use crate::journal::segments::JournalSettings;
use crate::journal::EventPipeline;
use crate::live::Live;
use crate::outbound::Outbound;
use crate::privacy::{Privacy, PrivacySettings};
use crate::store::rollup::RollupOptions;
use crate::store::seal_keys::RingSecrets;
use crate::workers::Workers;
use axum::routing::get;
use axum::Router;
use sqlx::MySqlPool;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Everything [`App::build`] needs besides the public listener.
#[derive(Clone)]
pub struct AppSettings {
    /// The server's pool (connect lazily to start while the database is down).
    pub pool: MySqlPool,
    pub server: ServerSettings,
    pub journal: JournalSettings,
    /// Bearer token of the stats API and dashboard; `None` turns them off.
    pub api_token: Option<String>,
    /// `LINKTRACK_API_KEY_SECRET`: the key of API keys' stored hashes;
    /// `None`: `secret` is (docs/api.md, "Keys and scopes").
    pub api_key_secret: Option<String>,
    /// `LINKTRACK_SECRET`: the current seal key's secret, and the key of
    /// the dashboard login; `None` turns the login form off.
    pub secret: Option<String>,
    /// Earlier keys' secrets: tokens sealed with them still open.
    pub previous_secrets: Vec<String>,
    /// `secret` is a new key: record it as the current one.
    pub new_secret: bool,
    /// `LINKTRACK_BOUNCE_DOMAIN`: each letter of `POST /api/letters` gets
    /// its VERP envelope sender there; `None`: none.
    pub bounce_domain: Option<String>,
    /// The Redis live layer, when configured.
    pub live: Option<Live>,
    /// Run the rollup worker in this process this often; `None`: not here.
    pub rollup_every: Option<Duration>,
    pub rollup: RollupOptions,
    /// Where `/metrics` and `/readyz` answer; `None`: nowhere.
    pub admin_listen: Option<SocketAddr>,
    /// Bearer token `/metrics` and `/readyz` require; `None`: open (keep
    /// the admin listener on loopback or a private network then).
    pub admin_token: Option<String>,
    /// Header timeout, connection cap and header size of both listeners.
    pub connections: ConnectionLimits,
    /// Webhook and AMQP endpoints events go out to; empty: none.
    pub outbound: Outbound,
    /// How the server follows opt-outs and erasures (docs/privacy.md).
    pub privacy: PrivacySettings,
    /// The TLS listener of the tracking domains and how their certificates
    /// are obtained (docs/domains.md, "Certificates"); `None`: plain HTTP
    /// only, TLS left to a reverse proxy.
    pub tls: Option<TlsSettings>,
    /// How often this server reads again what other servers write: link
    /// repoints and UTM tags, and live mailings' link templates (the
    /// offline redirects). Defaults to [`FOLLOW_EVERY`].
    pub follow_every: Duration,
}

/// Every server takes in another server's repoint, and a new mailing's
/// links for the offline redirects, within this.
pub const FOLLOW_EVERY: Duration = Duration::from_secs(2);

/// `--tls-listen` and the certificates served there.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub listen: SocketAddr,
    pub certificates: CertificateSettings,
}

impl AppSettings {
    /// Defaults around a pool and a journal directory: stats off, no live
    /// layer, no rollup worker, the admin listener on a free loopback port.
    pub fn new(pool: MySqlPool, journal: JournalSettings) -> AppSettings {
        AppSettings {
            pool,
            server: ServerSettings::default(),
            journal,
            api_token: None,
            api_key_secret: None,
            secret: None,
            previous_secrets: Vec::new(),
            new_secret: false,
            bounce_domain: None,
            live: None,
            rollup_every: None,
            rollup: RollupOptions::default(),
            admin_listen: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
            admin_token: None,
            connections: ConnectionLimits::default(),
            outbound: Outbound::default(),
            privacy: PrivacySettings::default(),
            tls: None,
            follow_every: FOLLOW_EVERY,
        }
    }
}

/// A built server: listening, journal recovered, workers running.
pub struct App {
    public: TcpListener,
    admin: Option<TcpListener>,
    admin_token: Option<String>,
    state: AppState,
    /// The API's state, the dashboard's inside it.
    api: ApiState,
    /// `/hooks/ses` and `/hooks/mailgun` (`hooks`).
    hooks: Router,
    pipeline: EventPipeline,
    workers: Workers,
    limits: ConnectionLimits,
    tls: Option<TlsListener>,
}

/// The bound TLS listener and the certificates it serves by SNI.
struct TlsListener {
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl App {
    /// Recover the journal, start the event pipeline and the background
    /// workers, bind the admin listener.
    pub async fn build(settings: AppSettings, listener: TcpListener) -> Result<App, ServeError> {
        // The seal key ring first: a ring the database refuses stops the
        // start before anything runs.
        let secrets = RingSecrets {
            current: settings.secret.clone(),
            previous: settings.previous_secrets.clone(),
            new_secret: settings.new_secret,
        };
        let ring = first_seal(&settings.pool, &secrets, settings.server.keep_days).await?;
        let admin = match settings.admin_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|err| ServeError::Bind(addr, err))?,
            ),
            None => None,
        };
        if let Some(listener) = &admin {
            warn_if_exposed(listener, settings.admin_token.is_some());
        }
        let certificates = Arc::new(Certificates::default());
        let tls = match &settings.tls {
            Some(tls) => Some(bind_tls(tls.listen, &certificates).await?),
            None => None,
        };
        let pool = settings.pool.clone();
        // Installed before anything registers a metric: a handle taken with
        // no recorder installed (the journal keeps its gauge's) stays mute.
        let prometheus = metrics::prometheus();
        let mut workers = Workers::new();
        let server = crate::outbound::registry::server_id(&settings.journal.dir);
        let privacy = Privacy::new(server, settings.privacy);
        // Loaded before the first hit when the database answers; otherwise
        // the worker keeps trying, and the replay stores nothing before it
        // has the view.
        if let Err(err) = privacy.refresh(&pool).await {
            tracing::warn!(%err, "opt-outs and erasures not read yet; retrying in the background");
        }
        // On a Spider head in the shard layout, lookups go to the data
        // nodes: the requests' and the replay's. The topology is saved
        // beside the journal, for a start while the head is down.
        let saved = settings
            .journal
            .dir
            .join(crate::store::cluster::TOPOLOGY_FILE);
        let router = crate::store::cluster::Router::discover_saving(&pool, Some(saved)).await;
        // The replay runs with the senders at low priority: during a burst
        // the requests get the CPU, and the journal holds the events until
        // the replay catches up.
        let pipeline = EventPipeline::start(
            pool.clone(),
            settings.journal.clone(),
            std::sync::Arc::new(settings.outbound.clone()),
            privacy.clone(),
            router.clone(),
            workers.low_priority_runtime(),
        )
        .await?;
        let state = AppState::new(
            pool.clone(),
            settings.server.clone(),
            pipeline.recorder(),
            prometheus,
            settings.live.clone(),
            router,
            privacy.clone(),
        )?;
        let mut stats = StatsState::new(
            pool,
            settings.api_token.as_deref(),
            settings.secret.as_deref(),
            settings.live.clone(),
        )?;
        stats.images = Some(state.images.clone());
        stats.auth.secure_cookie = settings.server.base_url.starts_with("https://");
        stats.auth.trust_forwarded_for = settings.server.trust_forwarded_for;
        // A slow body holds a connection no longer than slow headers could.
        stats.auth.body_deadline = Some(settings.connections.header_timeout);
        match ring {
            Some(opened) => state.set_seal(opened),
            None => load_seal_later(&state, secrets),
        }
        let api = api_state(&settings, stats);
        let hooks = super::hooks::router(state.clone(), settings.outbound.clone())?;
        start_workers(&settings, &mut workers, privacy);
        let (offline, pool) = (state.offline.clone(), settings.pool.clone());
        let (keep_days, db_timeout) = (settings.server.keep_days, settings.server.db_timeout);
        let every = settings.follow_every;
        workers.spawn("offline-targets", move |stopping| {
            offline.follow(pool, keep_days, db_timeout, every, stopping)
        });
        follow_link_rules(&settings.pool, &state, every, &mut workers).await;
        if let Some(tls) = &settings.tls {
            let (pool, settings) = (settings.pool.clone(), tls.certificates.clone());
            workers.spawn("certificates", move |stopping| {
                crate::acme::run(pool, certificates, settings, stopping)
            });
        }
        Ok(App {
            public: listener,
            admin,
            admin_token: settings.admin_token,
            state,
            api,
            hooks,
            pipeline,
            workers,
            limits: settings.connections,
            tls,
        })
    }

    /// The TLS listener's address, if there is one.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls
            .as_ref()
            .and_then(|tls| tls.listener.local_addr().ok())
    }

    /// The public listener's address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.public.local_addr()
    }

    /// The admin listener's address, if there is one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Names of the running background workers (for logs and tests).
    pub fn worker_names(&self) -> Vec<&'static str> {
        self.workers.names()
    }

    /// Serve until `shutdown` completes, then stop in the order of the
    /// module docs.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let App {
            public,
            admin,
            admin_token,
            state,
            api,
            hooks,
            pipeline,
            workers,
            limits,
            tls,
        } = self;
        let deadline = state.settings.flush_deadline;
        // One shutdown signal for both listeners.
        let (stop, stopped) = watch::channel(false);
        let admin_task = admin.map(|listener| {
            let app = admin_router(state.clone(), admin_guard(admin_token, &api.stats));
            let mut stopped = stopped.clone();
            tokio::spawn(listen::serve(listener, app, limits, None, async move {
                let _ = stopped.wait_for(|s| *s).await;
            }))
        });
        // Event streams never end by themselves: told to when accepting stops.
        let event_streams = api.events.clone();
        let app = public_router(state, api, hooks).await;
        let tls_task = tls.map(|tls| {
            let mut stopped = stopped.clone();
            let serving = listen::serve(
                tls.listener,
                app.clone(),
                limits,
                Some(tls.acceptor),
                async move {
                    let _ = stopped.wait_for(|s| *s).await;
                },
            );
            tokio::spawn(serving)
        });
        let mut public_stopped = stopped;
        listen::serve(public, app, limits, None, async move {
            tokio::select! {
                () = shutdown => {}
                _ = public_stopped.wait_for(|s| *s) => {}
            }
            event_streams.close();
        })
        .await;
        let _ = stop.send(true);
        if let Some(task) = tls_task {
            let _ = task.await;
        }
        let admin_served = match admin_task {
            Some(task) => task.await.map_err(ServeError::AdminTask),
            None => Ok(()),
        };
        tracing::info!("stopped accepting requests; flushing events");
        pipeline.shutdown(deadline).await;
        workers.shutdown(deadline).await;
        admin_served
    }

    /// Serve on background tasks that can be killed as a crash would kill
    /// them: nothing flushed. Returns handles that abort everything. For
    /// tests of journal durability.
    #[cfg(feature = "test-hooks")]
    pub fn spawn_abortable(self) -> Vec<tokio::task::AbortHandle> {
        let App {
            public,
            admin,
            admin_token,
            state,
            api,
            hooks,
            pipeline,
            workers,
            limits,
            tls,
        } = self;
        let mut handles = pipeline.abort_handles();
        handles.extend(workers.abort_handles());
        if let Some(listener) = admin {
            let app = admin_router(state.clone(), admin_guard(admin_token, &api.stats));
            let serving = listen::serve(listener, app, limits, None, std::future::pending());
            handles.push(tokio::spawn(serving).abort_handle());
        }
        let serving = tokio::spawn(async move {
            // The pipeline and the workers live as long as the server task.
            let _pipeline = pipeline;
            let _workers = workers;
            let app = public_router(state, api, hooks).await;
            if let Some(tls) = tls {
                let acceptor = Some(tls.acceptor);
                let serving = listen::serve(
                    tls.listener,
                    app.clone(),
                    limits,
                    acceptor,
                    std::future::pending(),
                );
                tokio::spawn(serving);
            }
            listen::serve(public, app, limits, None, std::future::pending()).await
        });
        handles.push(serving.abort_handle());
        handles
    }
}

/// Start the background workers this configuration asks for.
///
/// **Register new background workers here**:
/// `workers.spawn("name", |stopping| your_loop(.., stopping))`.
/// Each is stopped and joined by [`App::run`] after the event pipeline has
/// flushed (see the module docs).
fn start_workers(settings: &AppSettings, workers: &mut Workers, privacy: Privacy) {
    let pool = settings.pool.clone();
    workers.spawn("privacy", move |stopping| privacy.run(pool, stopping));
    if let Some(every) = settings.rollup_every {
        let pool = settings.pool.clone();
        let live = settings.live.clone();
        let options = settings.rollup.clone();
        let senders = Some(settings.outbound.waker());
        workers.spawn("rollup", move |stopping| {
            crate::rollup_worker::run_worker(pool, live, options, every, senders, stopping)
        });
    }
    let pool = settings.pool.clone();
    workers.spawn("health-gauges", move |stopping| {
        super::health_gauges::run(pool, stopping)
    });
    let server = crate::outbound::registry::server_id(&settings.journal.dir);
    crate::outbound::start_senders(&settings.pool, &settings.outbound, server, workers);
}

/// Read the repoints and UTM tags before the first click when the database
/// answers, then keep them current in a worker.
async fn follow_link_rules(
    pool: &MySqlPool,
    state: &AppState,
    every: Duration,
    workers: &mut Workers,
) {
    let rules = state.link_rules.clone();
    if let Err(err) = rules.refresh(pool).await {
        tracing::warn!(%err, "link repoints and UTM tags not read yet; retrying in the background");
    }
    let pool = pool.clone();
    workers.spawn("link-rules", move |stopping| {
        rules.run(pool, every, stopping)
    });
}

/// Binds the TLS listener, its certificates picked by SNI from `certificates`.
async fn bind_tls(
    listen: SocketAddr,
    certificates: &Arc<Certificates>,
) -> Result<TlsListener, ServeError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|err| ServeError::Bind(listen, err))?;
    let config = crate::acme::server_config(certificates.clone()).map_err(ServeError::Tls)?;
    Ok(TlsListener {
        listener,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    })
}

/// Open the token seal key ring now if the database answers (`None`
/// when it does not: [`load_seal_later`]). A ring the database refuses
/// stops the start.
async fn first_seal(
    pool: &MySqlPool,
    secrets: &RingSecrets,
    keep_days: u32,
) -> Result<Option<crate::store::seal_keys::OpenedRing>, ServeError> {
    let purpose = crate::store::seal_keys::Purpose::Serve { keep_days };
    let open = crate::store::seal_keys::open_ring(pool, secrets, purpose);
    match tokio::time::timeout(Duration::from_secs(5), open).await {
        Ok(Ok(opened)) => Ok(Some(opened)),
        Ok(Err(crate::store::StoreError::SealKey(refusal))) => Err(ServeError::SealKey(refusal)),
        Ok(Err(err)) => {
            tracing::warn!(%err, "token seal not read; retrying every second");
            Ok(None)
        }
        Err(_) => {
            tracing::warn!("token seal not read (no answer in 5 s); retrying every second");
            Ok(None)
        }
    }
}

/// The server started while the database was down: keep trying in the
/// background, serving tokens as legacy ones (kind from the row) until the
/// ring is read. Refused then, the refusal is logged and the ring never
/// loaded: tokens go on being served by their rows alone.
fn load_seal_later(state: &AppState, secrets: RingSecrets) {
    let state = state.clone();
    tokio::spawn(async move {
        loop {
            match state.load_seal(&secrets).await {
                Ok(()) => break tracing::info!("token seal read"),
                Err(SealLoadError::Refused(refusal)) => {
                    break tracing::error!(
                        "{refusal}; until restarted with a ring the database knows, tokens are \
                         served by their rows alone (expired links answer 410)"
                    )
                }
                Err(SealLoadError::Unavailable(_)) => {
                    tokio::time::sleep(Duration::from_secs(1)).await
                }
            }
        }
    });
}

/// The admin token and the limiter its wrong guesses count in (the one
/// the stats routes use).
#[derive(Clone)]
struct AdminGuard {
    token: std::sync::Arc<str>,
    guesses: super::guesses::GuessLimiter,
    trust_forwarded_for: bool,
}

/// The API's state: the dashboard's, and the keys checked with the key
/// secret (the dedicated one, else `LINKTRACK_SECRET`). The API is on with
/// a token or a dedicated key secret; with neither it stays off (404), as
/// it always was without a token.
fn api_state(settings: &AppSettings, stats: StatsState) -> ApiState {
    let on = settings.api_token.is_some() || settings.api_key_secret.is_some();
    let key_secret = crate::api_keys::KeySecret::in_force(
        settings.api_key_secret.as_deref(),
        settings.secret.as_deref(),
    )
    .filter(|_| on);
    let keys = crate::api_keys::KeyVerifier::new(
        stats.pool.clone(),
        key_secret.clone(),
        settings.api_token.as_deref(),
    );
    let events = super::api::event_feed::EventFeed::new(stats.pool.clone());
    let letters = super::api::LetterTracking::new(
        stats.pool.clone(),
        settings.secret.clone(),
        settings.server.base_url.clone(),
        settings.bounce_domain.clone(),
    );
    ApiState {
        stats,
        keys,
        key_secret,
        events,
        letters,
    }
}

fn admin_guard(token: Option<String>, stats: &StatsState) -> Option<AdminGuard> {
    token.map(|token| AdminGuard {
        token: token.into(),
        guesses: stats.auth.guesses.clone(),
        trust_forwarded_for: stats.auth.trust_forwarded_for,
    })
}

/// The operators' listener: readiness and metrics, off the public host;
/// with a token, `/readyz` and `/metrics` require `Authorization: Bearer`
/// (`/healthz` stays open: it says nothing but "the process is up").
fn admin_router(state: AppState, guard: Option<AdminGuard>) -> Router {
    let guarded = Router::new()
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics));
    let guarded = match guard {
        Some(guard) => guarded.layer(axum::middleware::from_fn_with_state(
            guard,
            require_admin_token,
        )),
        None => guarded,
    };
    Router::new()
        .route("/healthz", get(handlers::healthz))
        .merge(guarded)
        .with_state(state)
}

/// 401 unless the request carries `Authorization: Bearer <the admin token>`;
/// 429 from a network that guessed wrong too often (checked first).
async fn require_admin_token(
    axum::extract::State(guard): axum::extract::State<AdminGuard>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let client = super::guesses::client_address(
        guard.trust_forwarded_for,
        request.extensions(),
        request.headers(),
    );
    if let Err(blocked) = guard.guesses.check(client).await {
        return super::guesses::too_many(blocked, "too many wrong admin tokens\n");
    }
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let allowed = given.is_some_and(|given| {
        super::stats::credentials::constant_time_eq(given.trim().as_bytes(), guard.token.as_bytes())
    });
    if given.is_some() && !allowed {
        if let Err(blocked) = guard.guesses.wrong(client, "admin_token").await {
            return super::guesses::too_many(blocked, "too many wrong admin tokens\n");
        }
    }
    if allowed {
        next.run(request).await
    } else {
        (
            axum::http::StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "an admin token is required\n",
        )
            .into_response()
    }
}

/// Says loudly when the admin listener is reachable from other hosts:
/// `/metrics` and `/readyz` describe the service to whoever asks.
fn warn_if_exposed(listener: &TcpListener, has_token: bool) {
    let Ok(addr) = listener.local_addr() else {
        return;
    };
    if addr.ip().is_loopback() {
        return;
    }
    if has_token {
        tracing::warn!(
            admin = %addr,
            "the admin listener (/metrics, /readyz) is reachable from other hosts; \
             it requires the admin token"
        );
    } else {
        tracing::warn!(
            admin = %addr,
            "the admin listener (/metrics, /readyz) is reachable from other hosts \
             WITHOUT credentials; bind it to 127.0.0.1 or set --admin-token"
        );
    }
}
