//! What every handler shares: settings, the pool, caches, the event recorder.

use super::error::{within, ServerError};
use super::hook_settings::HookSettings;
use super::image::{ImageProxy, ImageSettings};
use super::lookups::{LinkLookups, LookupSettings};
use super::offline_targets::OfflineTargets;
use crate::address::Fingerprint;
use crate::bots::{BotDetector, BotRules};
use crate::journal::segments::Recorder;
use crate::kind::LinkKind;
use crate::privacy::Privacy;
use crate::store::link_templates::LinkTemplate;
use crate::store::links::StoredLink;
use crate::store::seal_keys::{self, KeyRefusal, RingSecrets};
use crate::store::StoreError;
use crate::token::{Plaintext, SealRing, Token};
use chrono::{DateTime, Utc};
use metrics_exporter_prometheus::PrometheusHandle;
use moka::future::Cache;
use sqlx::MySqlPool;
use std::sync::Arc;
use std::time::Duration;

/// The public base URL tracked links point at when none is configured.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080";

/// Settings of `linktrack serve`.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Days of links kept; older tokens answer 410 without a database read.
    pub keep_days: u32,
    /// Public base URL (for logs and pages; routes are relative).
    pub base_url: String,
    /// Links kept in memory so hot links survive a database outage.
    pub link_cache_entries: u64,
    pub link_cache_ttl: Duration,
    pub bots: BotRules,
    pub images: ImageSettings,
    /// How long graceful shutdown may spend flushing events to the database.
    pub flush_deadline: Duration,
    /// The longest a request waits for one database statement (connection
    /// included) before answering 503: a stalled database must not hang
    /// visitors.
    pub db_timeout: Duration,
    /// Journal and store events. Off only to measure what recording costs;
    /// not exposed on the command line.
    pub record_events: bool,
    /// Take the client address from the last `X-Forwarded-For` entry (set
    /// this only behind a proxy that appends it); otherwise the peer address.
    pub trust_forwarded_for: bool,
    /// Link lookups running at once; cache misses that arrive while all of
    /// them are busy share the next statement (`LinkLookups`).
    pub lookups_in_flight: usize,
    /// Where the operator's `apple-app-site-association` and
    /// `assetlinks.json` are (per host in a folder named after it); `None`:
    /// not served (docs/domains.md, "App links").
    pub well_known_dir: Option<std::path::PathBuf>,
    /// The providers' bounce and complaint webhooks (off by default).
    pub hooks: HookSettings,
    /// The operator's GeoIP database (`serve --geoip`): each event gets
    /// its client address's country. `None`: no country is recorded.
    pub geoip: Option<Arc<super::geoip::GeoIp>>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            keep_days: crate::store::partitions::DEFAULT_KEEP_DAYS,
            base_url: DEFAULT_BASE_URL.to_owned(),
            link_cache_entries: 200_000,
            link_cache_ttl: Duration::from_secs(3_600),
            bots: BotRules::default(),
            images: ImageSettings::default(),
            flush_deadline: Duration::from_secs(10),
            db_timeout: Duration::from_secs(2),
            record_events: true,
            trust_forwarded_for: false,
            lookups_in_flight: LookupSettings::default().in_flight,
            well_known_dir: None,
            hooks: HookSettings::default(),
            geoip: None,
        }
    }
}

/// A link as the server holds it (and caches it): its row without the
/// address, unless its route acts for the person (an unsubscribe or a
/// "stop tracking me" link must work from the cache while the database is
/// away), and whose letter it is as a [`Reader`]. So a server's link cache
/// holds addresses only for the links that act on them, and an erasure
/// drops those (docs/privacy.md).
#[derive(Debug, Clone, PartialEq)]
pub struct ServedLink {
    pub link: StoredLink,
    pub reader: Reader,
}

/// Whose letter a link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// Nobody's: a row every letter of a mailing shares (letter 0), or an
    /// erased letter's (its address blanked).
    Nobody,
    /// One reader's letter, by the address's fingerprint (`None` while the
    /// address key is not read yet: the replay decides then).
    Person(Option<Fingerprint>),
}

impl ServedLink {
    /// The row as served: its reader's fingerprint taken, its address
    /// dropped unless the route needs it.
    pub fn of(mut link: StoredLink, privacy: &Privacy) -> ServedLink {
        let reader = if link.letter_id == 0 || link.email.is_empty() {
            Reader::Nobody
        } else {
            Reader::Person(privacy.fingerprint(&link.email))
        };
        if !matches!(link.kind, LinkKind::Unsubscribe | LinkKind::OptOut) {
            link.email = String::new();
        }
        ServedLink { link, reader }
    }
}

impl std::ops::Deref for ServedLink {
    type Target = StoredLink;

    fn deref(&self) -> &StoredLink {
        &self.link
    }
}

/// Drop the cached links of addresses erased from now on (an unsubscribe
/// link holds its address), and those cached before the key was read
/// (their reader is unknown).
fn drop_erased_from(links: &Cache<Token, Arc<ServedLink>>, privacy: &Privacy) {
    let links = links.clone();
    privacy.on_erasure(move |erased| {
        let erased: crate::privacy::FingerprintSet = erased.iter().copied().collect();
        let dropped = links.invalidate_entries_if(move |_, link| match link.reader {
            Reader::Person(Some(fingerprint)) => erased.contains(&fingerprint),
            Reader::Person(None) => true,
            Reader::Nobody => false,
        });
        if let Err(err) = dropped {
            // Only when the cache was built without invalidation closures.
            tracing::error!(%err, "erased addresses' links not dropped from the cache");
        }
    });
}

/// Shared state: one pointer, so the clones axum makes per request (its
/// middleware and the handler each take one) cost one atomic increment,
/// not one per field (cloning the fields showed in an open's profile).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] points to.
pub struct Shared {
    pub pool: MySqlPool,
    pub settings: Arc<ServerSettings>,
    pub links: Cache<Token, Arc<ServedLink>>,
    /// Who withdrew from tracking, who was erased ([`Privacy`]).
    pub privacy: Privacy,
    /// Where cache misses are read, together with concurrent ones.
    pub(crate) lookups: LinkLookups,
    pub recorder: Recorder,
    pub bots: Arc<BotDetector>,
    pub images: Arc<ImageProxy>,
    pub metrics: PrometheusHandle,
    /// The Redis live layer, when configured; `/readyz` reports on it.
    pub live: Option<crate::live::Live>,
    /// The token seal keys (docs/token.md), once `token_format` has been
    /// read and the ring checked against `seal_keys`.
    seal: std::sync::OnceLock<SealRing>,
    /// Link templates read by late hits; they never change.
    templates: Cache<u32, Arc<LinkTemplate>>,
    /// The templates of live mailings, held for clicks while the database
    /// is away ([`OfflineTargets`]).
    pub offline: Arc<OfflineTargets>,
    /// Repointed links and UTM tags, applied to each click's target.
    pub link_rules: super::link_rules::LinkRules,
    /// On a Spider head: the router lookups go through; `/readyz` says
    /// where its topology came from.
    pub cluster: Option<crate::store::cluster::Router>,
}

impl AppState {
    pub fn new(
        pool: MySqlPool,
        settings: ServerSettings,
        recorder: Recorder,
        metrics: PrometheusHandle,
        live: Option<crate::live::Live>,
        router: Option<crate::store::cluster::Router>,
        privacy: Privacy,
    ) -> Result<Self, reqwest::Error> {
        let links: Cache<Token, Arc<ServedLink>> = Cache::builder()
            .max_capacity(settings.link_cache_entries)
            .time_to_live(settings.link_cache_ttl)
            .support_invalidation_closures()
            .build();
        drop_erased_from(&links, &privacy);
        let readers = recorder.readers().clone();
        privacy.on_erasure(move |_| readers.forget_all());
        let lookups = LinkLookups::start(
            pool.clone(),
            router.clone(),
            LookupSettings {
                in_flight: settings.lookups_in_flight,
                db_timeout: settings.db_timeout,
                ..LookupSettings::default()
            },
        );
        Ok(AppState(Arc::new(Shared {
            pool,
            links,
            privacy,
            lookups,
            recorder,
            bots: Arc::new(BotDetector::new(settings.bots.clone())),
            images: Arc::new(ImageProxy::new(settings.images.clone())?),
            metrics,
            settings: Arc::new(settings),
            live,
            seal: std::sync::OnceLock::new(),
            templates: Cache::builder().max_capacity(100_000).build(),
            offline: Arc::new(OfflineTargets::new(super::offline_targets::MAX_TARGETS)),
            link_rules: super::link_rules::LinkRules::default(),
            cluster: router,
        })))
    }

    /// Check a token without touching the database: malformed or too far in
    /// the future is 404; `true` beside it says it is older than the
    /// retention window (its row is gone: 410 unless its template answers).
    pub fn check_token(&self, text: &str) -> Result<(Token, bool), ServerError> {
        self.check_token_at(text, Utc::now())
    }

    /// [`AppState::check_token`] as of `now` (a request that also records
    /// its hit reads the clock once for both).
    pub fn check_token_at(
        &self,
        text: &str,
        now: DateTime<Utc>,
    ) -> Result<(Token, bool), ServerError> {
        let token = Token::parse(text).map_err(|_| ServerError::NotFound)?;
        match token.is_expired_at(now, self.settings.keep_days) {
            Some(expired) => Ok((token, expired)),
            None => Err(ServerError::NotFound),
        }
    }

    /// The token seal keys, once loaded ([`AppState::load_seal`]).
    pub fn seal(&self) -> Option<&SealRing> {
        self.seal.get()
    }

    /// Use `opened` as the seal key ring (its warnings are logged here).
    pub fn set_seal(&self, opened: seal_keys::OpenedRing) {
        for warning in &opened.warnings {
            tracing::warn!("{warning}");
        }
        let _ = self.seal.set(opened.ring);
    }

    /// Open the seal key ring (`token_format`, `seal_keys`). Until it is
    /// read, tokens are served as legacy ones (kind from the row). A ring
    /// the database refuses is never loaded: tokens are then served by
    /// their rows alone, which a wrong key cannot mislead.
    pub async fn load_seal(&self, secrets: &RingSecrets) -> Result<(), SealLoadError> {
        let purpose = seal_keys::Purpose::Serve {
            keep_days: self.settings.keep_days,
        };
        let open = seal_keys::open_ring(&self.pool, secrets, purpose);
        let opened = match tokio::time::timeout(self.settings.db_timeout, open).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(StoreError::SealKey(refusal))) => return Err(SealLoadError::Refused(refusal)),
            Ok(Err(err)) => return Err(SealLoadError::Unavailable(err.into())),
            Err(_) => {
                let waited = self.settings.db_timeout;
                let err = ServerError::Unavailable(format!("no answer within {waited:?}"));
                return Err(SealLoadError::Unavailable(err));
            }
        };
        self.set_seal(opened);
        Ok(())
    }

    /// The template a late `token` names under any key of the ring: the
    /// first opening whose kind fits `kind` and whose template passes the
    /// checks of [`AppState::find_template`]. A token of a previous key may
    /// open under the current one to a fitting kind by chance; its
    /// template then does not pass, and the next key is tried.
    pub async fn find_late_template(
        &self,
        token: &Token,
        kind: LinkKind,
        fits: impl Fn(crate::kind::TokenKind) -> bool,
    ) -> Result<Option<Arc<LinkTemplate>>, ServerError> {
        let Some(ring) = self.seal() else {
            return Ok(None);
        };
        for opened in ring.openings(token, fits) {
            if let crate::token::Opened::Sealed(plain) = opened {
                if let Some(template) = self.find_template(token, plain, kind).await? {
                    return Ok(Some(template));
                }
            }
        }
        Ok(None)
    }

    /// The template a sealed token names, if it passes the checks of
    /// docs/token.md: it exists, its kind is the token's, and the token is
    /// not dated before the template's first day. `None`: the token is
    /// unknown (forged, or sealed by another installation or secret).
    pub async fn find_template(
        &self,
        token: &Token,
        plain: Plaintext,
        kind: LinkKind,
    ) -> Result<Option<Arc<LinkTemplate>>, ServerError> {
        if plain.template == 0 {
            return Ok(None);
        }
        let held = match self.offline.get(plain.template) {
            Some(template) => Some(template),
            None => self.templates.get(&plain.template).await,
        };
        let template = match held {
            Some(template) => template,
            None => {
                let find = crate::store::link_templates::find(&self.pool, plain.template);
                match self.bounded(find).await? {
                    Some(template) => {
                        let template = Arc::new(template);
                        self.templates
                            .insert(plain.template, template.clone())
                            .await;
                        template
                    }
                    None => return Ok(None),
                }
            }
        };
        let fits = template.kind == kind && token.date() >= template.first_day;
        Ok(fits.then_some(template))
    }

    /// The template a sealed `token` names under any key of the ring, from
    /// memory alone ([`OfflineTargets`]), if it passes the checks of
    /// [`AppState::find_template`]: what a click is redirected by while
    /// the database does not answer.
    pub fn offline_template(
        &self,
        token: &Token,
        kind: LinkKind,
        fits: impl Fn(crate::kind::TokenKind) -> bool,
    ) -> Option<Arc<LinkTemplate>> {
        let ring = self.seal()?;
        ring.openings(token, fits).find_map(|opened| {
            let crate::token::Opened::Sealed(plain) = opened else {
                return None;
            };
            let template = self
                .offline
                .get(plain.template)
                .filter(|_| plain.template != 0)?;
            (template.kind == kind && token.date() >= template.first_day).then_some(template)
        })
    }

    /// Run one database call within `db_timeout`; running out of time is
    /// the same as the database being unavailable.
    pub async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, ServerError> {
        within(self.settings.db_timeout, call).await
    }

    /// The link behind a token: from the cache, else one single-partition read.
    pub async fn find_link(&self, token: Token) -> Result<Arc<ServedLink>, ServerError> {
        if let Some(link) = self.links.get(&token).await {
            metrics::counter!("linktrack_link_cache_total", "result" => "hit").increment(1);
            return Ok(link);
        }
        metrics::counter!("linktrack_link_cache_total", "result" => "miss").increment(1);
        // A token is one reader's link, so concurrent misses for the same
        // token are rare (a scanner's fan-out), and they still share the
        // batch statement ([`LinkLookups`]). moka's `try_get_with`, which
        // would make them share one lookup, costs every redirect far more
        // than a plain insert, for a case that is rare.
        let readers = self.recorder.readers();
        // Taken before the read: a row read across an erasure is not held.
        let epoch = self.settings.record_events.then(|| readers.epoch());
        let row = self.lookup(token).await?;
        if let Some(epoch) = epoch {
            // The row with its address, for this hit's replay: no second
            // read ([`crate::journal::readers`]); the cache keeps none.
            readers.hold(epoch, token, &row);
        }
        let link = Arc::new(ServedLink::of(StoredLink::clone(&row), &self.privacy));
        self.links.insert(token, link.clone()).await;
        Ok(link)
    }

    /// A cache miss's read, shared with the misses of concurrent requests
    /// ([`LinkLookups`]).
    async fn lookup(&self, token: Token) -> Result<Arc<StoredLink>, ServerError> {
        metrics::counter!("linktrack_link_lookups_total").increment(1);
        self.lookups
            .lookup(token, self.settings.db_timeout)
            .await?
            .ok_or(ServerError::NotFound)
    }
}

/// Why the seal key ring was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum SealLoadError {
    /// The database refuses the ring: the server must not start with it.
    #[error(transparent)]
    Refused(KeyRefusal),
    /// The database did not answer; try again.
    #[error(transparent)]
    Unavailable(ServerError),
}
