//! Where events go: the endpoints of `LINKTRACK_WEBHOOK_URL` (named
//! `default`), `LINKTRACK_AMQP_URL` (named `amqp`) and the endpoints file
//! (`--webhooks FILE`, TOML), each checked at start: a bad URL, secret or
//! filter is refused with the setting's (or the file's key's) name.
//!
//! ```toml
//! [[endpoint]]
//! name = "crm"                        # [a-z0-9_-], unique; labels metrics
//! url = "https://crm.example.com/hooks/linktrack"
//! secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
//! types = ["email.clicked", "email.unsubscribed"]   # optional filter
//! mailings = ["spring-sale"]                         # optional filter
//! concurrency = 4                     # requests in flight (default 8)
//! timeout_ms = 5000                   # per request (default 10000)
//! batch = 100                         # events per request (default 1: one each)
//!
//! [[endpoint]]
//! name = "pipeline"
//! url = "amqp://guest:guest@127.0.0.1:5672/%2f"    # AMQP: publish to RabbitMQ
//! exchange = "linktrack.events"
//! ```

use super::settings::OutboundSettings;
use super::signature::{Secret, SecretError};
use crate::payload::EVENT_TYPES;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default AMQP exchange events are published to.
pub const DEFAULT_AMQP_EXCHANGE: &str = "linktrack.events";

/// Where one endpoint's events go.
#[derive(Debug, Clone)]
pub enum Target {
    /// Standard Webhooks POSTs.
    Webhook { url: reqwest::Url, secret: Secret },
    /// AMQP 0-9-1 publishes to a durable topic exchange, routing key = type.
    Amqp { url: String, exchange: String },
}

/// One endpoint: a name, a target, a filter and its limits.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub name: String,
    pub target: Target,
    /// Event types sent; `None`: all.
    pub types: Option<Vec<String>>,
    /// Mailings sent; `None`: all.
    pub mailings: Option<Vec<String>>,
    /// Deliveries in flight at once (per server).
    pub concurrency: usize,
    /// Longest wait for one delivery's answer.
    pub timeout: Duration,
    /// Events per request: 1 sends each on its own; more sends up to this
    /// many in one `"type": "batch"` body (webhooks only).
    pub batch: usize,
    /// The addresses its webhooks may go to: public ones, and the networks
    /// of `--outbound-allow-private`. AMQP brokers are the
    /// operator's own infrastructure and are not held to it.
    pub destinations: crate::destinations::Destinations,
}

/// The most events one batch may carry (a batch's row count is kept in 16
/// bits of `outbox.batch`, and a body of 1000 events is about half a MB).
pub const MAX_BATCH: usize = 1_000;

/// A URL as it may be shown, logged or stored: credentials never leave the
/// process, so a password becomes `***` (`user:***@`), a user name alone
/// (a token) too, and every query value and the fragment as well (keys
/// stay, to tell the endpoints apart).
pub fn redacted(url: &reqwest::Url) -> String {
    const HIDDEN: &str = "***";
    let mut shown = url.clone();
    if shown.password().is_some() {
        let _ = shown.set_password(Some(HIDDEN));
    } else if !shown.username().is_empty() {
        let _ = shown.set_username(HIDDEN);
    }
    if shown.query().is_some() {
        let keys: Vec<String> = url.query_pairs().map(|(key, _)| key.into_owned()).collect();
        shown
            .query_pairs_mut()
            .clear()
            .extend_pairs(keys.iter().map(|key| (key.as_str(), HIDDEN)));
    }
    if shown.fragment().is_some() {
        shown.set_fragment(Some(HIDDEN));
    }
    shown.to_string()
}

impl Endpoint {
    /// Where events go, as `webhooks list` prints it (never the secret).
    pub fn target_text(&self) -> String {
        match &self.target {
            Target::Webhook { url, .. } => redacted(url),
            Target::Amqp { exchange, .. } => format!("amqp exchange {exchange}"),
        }
    }

    /// The filter, as `webhooks list` prints it: `all`, or
    /// `types=… mailings=…`.
    pub fn filter_text(&self) -> String {
        let filter = [
            self.types
                .as_ref()
                .map(|t| format!("types={}", t.join(","))),
            self.mailings
                .as_ref()
                .map(|m| format!("mailings={}", m.join(","))),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
        if filter.is_empty() {
            "all".into()
        } else {
            filter
        }
    }

    /// True when this endpoint wants events of `event_type` in `mailing`.
    pub fn wants(&self, event_type: &str, mailing: Option<&str>) -> bool {
        let type_ok = self
            .types
            .as_ref()
            .is_none_or(|types| types.iter().any(|t| t == event_type));
        let mailing_ok = self.mailings.as_ref().is_none_or(|mailings| {
            mailing.is_some_and(|m| mailings.iter().any(|wanted| wanted == m))
        });
        type_ok && mailing_ok
    }
}

/// A setting or endpoints-file entry that cannot be used, named.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("{setting}: {source}")]
    Setting {
        setting: &'static str,
        #[source]
        source: Invalid,
    },
    #[error(transparent)]
    Unreadable(#[from] crate::settings_file::SettingsFileError),
    #[error("{}: endpoint {number} ({name:?}): {source}", path.display())]
    File {
        path: PathBuf,
        /// Counted from 1, as the file's `[[endpoint]]` tables are read.
        number: usize,
        name: String,
        #[source]
        source: Invalid,
    },
    #[error("endpoint {endpoint:?} ({target}): {refused}")]
    Destination {
        endpoint: String,
        target: String,
        refused: crate::destinations::Refused,
    },
}

/// What is wrong with one setting's value or one field of an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    /// A rule of this module, said in its own words.
    #[error("{0}")]
    Rule(String),
    /// An endpoint's field: its name, then what is wrong with it.
    #[error("{field}: {source}")]
    Field {
        field: &'static str,
        #[source]
        source: Box<Invalid>,
    },
    #[error("{text:?}: {source}")]
    Url {
        text: String,
        #[source]
        source: url::ParseError,
    },
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(transparent)]
    Network(#[from] crate::destinations::BadNetwork),
}

impl Invalid {
    fn of(field: &'static str) -> impl FnOnce(Invalid) -> Invalid {
        move |source| Invalid::Field {
            field,
            source: Box::new(source),
        }
    }
}

impl From<String> for Invalid {
    fn from(message: String) -> Invalid {
        Invalid::Rule(message)
    }
}

impl From<&str> for Invalid {
    fn from(message: &str) -> Invalid {
        Invalid::Rule(message.to_owned())
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointsFile {
    #[serde(default)]
    endpoint: Vec<FileEndpoint>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEndpoint {
    name: String,
    url: String,
    secret: Option<String>,
    exchange: Option<String>,
    types: Option<Vec<String>>,
    mailings: Option<Vec<String>>,
    concurrency: Option<usize>,
    timeout_ms: Option<u64>,
    batch: Option<usize>,
}

/// Every endpoint the settings name, checked.
pub fn from_settings(args: &OutboundSettings) -> Result<Vec<Endpoint>, EndpointError> {
    let allowed = args
        .outbound_allow_private
        .iter()
        .flat_map(|text| text.split(','))
        .filter(|text| !text.trim().is_empty())
        .map(str::parse)
        .collect::<Result<Vec<crate::destinations::Network>, _>>()
        .map_err(|bad| setting("LINKTRACK_OUTBOUND_ALLOW_PRIVATE", bad.into()))?;
    let destinations = crate::destinations::Destinations::allowing(allowed);
    let defaults = Limits {
        destinations: destinations.clone(),
        concurrency: args.webhook_concurrency.max(1),
        timeout: Duration::from_millis(args.webhook_timeout_ms.max(1)),
        batch: checked_batch(args.webhook_batch)
            .map_err(|message| setting("LINKTRACK_WEBHOOK_BATCH", message))?,
    };
    let mut endpoints = Vec::new();
    match (&args.webhook_url, &args.webhook_secret) {
        (Some(url), Some(secret)) => endpoints.push(Endpoint {
            name: "default".into(),
            target: Target::Webhook {
                url: http_url(url).map_err(|message| setting("LINKTRACK_WEBHOOK_URL", message))?,
                secret: Secret::parse(secret)
                    .map_err(|err| setting("LINKTRACK_WEBHOOK_SECRET", err.into()))?,
            },
            types: None,
            mailings: None,
            concurrency: defaults.concurrency,
            timeout: defaults.timeout,
            batch: defaults.batch,
            destinations: destinations.clone(),
        }),
        (Some(_), None) => {
            return Err(setting(
                "LINKTRACK_WEBHOOK_SECRET",
                "missing: LINKTRACK_WEBHOOK_URL needs its signing secret (whsec_ + base64)".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(setting(
                "LINKTRACK_WEBHOOK_URL",
                "missing: LINKTRACK_WEBHOOK_SECRET is set without a URL to sign for".into(),
            ))
        }
        (None, None) => {}
    }
    if let Some(url) = &args.amqp_url {
        endpoints.push(Endpoint {
            name: "amqp".into(),
            target: Target::Amqp {
                url: amqp_url(url).map_err(|message| setting("LINKTRACK_AMQP_URL", message))?,
                exchange: args.amqp_exchange.clone(),
            },
            types: None,
            mailings: None,
            concurrency: 1,
            timeout: defaults.timeout,
            batch: 1,
            destinations: destinations.clone(),
        });
    }
    if let Some(path) = &args.webhooks {
        endpoints.extend(read_file(path, &defaults)?);
    }
    // A literal address is known now: refused at start, naming the setting.
    for endpoint in &endpoints {
        if let Target::Webhook { url, .. } = &endpoint.target {
            endpoint
                .destinations
                .check_literal(url)
                .map_err(|refused| EndpointError::Destination {
                    endpoint: endpoint.name.clone(),
                    target: endpoint.target_text(),
                    refused,
                })?;
        }
    }
    let mut names: Vec<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(setting(
            "LINKTRACK_WEBHOOKS",
            format!(
                "two endpoints are named {:?}; names must be unique",
                pair[0]
            )
            .into(),
        ));
    }
    Ok(endpoints)
}

struct Limits {
    destinations: crate::destinations::Destinations,
    concurrency: usize,
    timeout: Duration,
    batch: usize,
}

/// 1 (off) to [`MAX_BATCH`] events per request.
fn checked_batch(batch: usize) -> Result<usize, Invalid> {
    if (1..=MAX_BATCH).contains(&batch) {
        Ok(batch)
    } else {
        Err(Invalid::Rule(format!(
            "{batch} events per request: must be 1 (one event per request) to {MAX_BATCH}"
        )))
    }
}

fn setting(setting: &'static str, source: Invalid) -> EndpointError {
    EndpointError::Setting { setting, source }
}

fn read_file(path: &Path, defaults: &Limits) -> Result<Vec<Endpoint>, EndpointError> {
    let file: EndpointsFile = crate::settings_file::read_toml_file(path)?;
    file.endpoint
        .into_iter()
        .enumerate()
        .map(|(index, entry)| {
            let name = entry.name.clone();
            file_endpoint(entry, defaults).map_err(|source| EndpointError::File {
                path: path.to_owned(),
                number: index + 1,
                name,
                source,
            })
        })
        .collect()
}

fn file_endpoint(entry: FileEndpoint, defaults: &Limits) -> Result<Endpoint, Invalid> {
    check_name(&entry.name)?;
    let amqp = entry.url.starts_with("amqp");
    let target = if amqp {
        if entry.secret.is_some() {
            return Err("secret: AMQP endpoints are not signed; remove it".into());
        }
        if entry.batch.is_some_and(|batch| batch != 1) {
            return Err("batch: AMQP endpoints publish one message per event".into());
        }
        Target::Amqp {
            url: amqp_url(&entry.url).map_err(Invalid::of("url"))?,
            exchange: entry
                .exchange
                .unwrap_or_else(|| DEFAULT_AMQP_EXCHANGE.to_owned()),
        }
    } else {
        if entry.exchange.is_some() {
            return Err("exchange: only AMQP endpoints have one".into());
        }
        let secret = entry
            .secret
            .ok_or("secret: missing (whsec_ + base64, Standard Webhooks)")?;
        Target::Webhook {
            url: http_url(&entry.url).map_err(Invalid::of("url"))?,
            secret: Secret::parse(&secret).map_err(|err| Invalid::of("secret")(err.into()))?,
        }
    };
    if let Some(types) = &entry.types {
        if let Some(bad) = types.iter().find(|t| !EVENT_TYPES.contains(&t.as_str())) {
            return Err(Invalid::Rule(format!(
                "types: unknown type {bad:?} (known: {})",
                EVENT_TYPES.join(", ")
            )));
        }
    }
    Ok(Endpoint {
        name: entry.name,
        target,
        types: entry.types,
        mailings: entry.mailings,
        concurrency: entry.concurrency.unwrap_or(defaults.concurrency).max(1),
        timeout: entry
            .timeout_ms
            .map_or(defaults.timeout, |ms| Duration::from_millis(ms.max(1))),
        batch: match entry.batch {
            _ if amqp => 1,
            Some(batch) => checked_batch(batch).map_err(Invalid::of("batch"))?,
            None => defaults.batch,
        },
        destinations: defaults.destinations.clone(),
    })
}

/// Names label metrics and rows: short, lowercase, no spaces.
fn check_name(name: &str) -> Result<(), Invalid> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(Invalid::Rule(format!(
            "name: {name:?} must be 1 to 64 of a-z, 0-9, - and _"
        )))
    }
}

fn http_url(text: &str) -> Result<reqwest::Url, Invalid> {
    let url = reqwest::Url::parse(text.trim()).map_err(|source| Invalid::Url {
        text: text.to_owned(),
        source,
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Invalid::Rule(format!(
            "{text:?}: scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    Ok(url)
}

/// Checked with lapin's own parser, so what passes here is what connects
/// (its error is text already: there is no cause to keep).
fn amqp_url(text: &str) -> Result<String, Invalid> {
    let text = text.trim();
    if let Err(said) = text.parse::<lapin::uri::AMQPUri>() {
        return Err(Invalid::Rule(format!(
            "not an AMQP URL (amqp://user:password@host:port/vhost): {said}"
        )));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_urls_keep_no_credential() {
        let cases = [
            (
                "https://user:hunter2@hooks.example.com/in?key=s3cr3t&v=2#frag",
                "https://user:***@hooks.example.com/in?key=***&v=***#***",
            ),
            (
                "https://tok3n@hooks.example.com/",
                "https://***@hooks.example.com/",
            ),
            (
                "https://hooks.example.com/in",
                "https://hooks.example.com/in",
            ),
        ];
        for (given, shown) in cases {
            let url = reqwest::Url::parse(given).unwrap();
            assert_eq!(redacted(&url), shown, "{given}");
        }
    }

    /// Settings as the command line's defaults give them, with `extra`'s
    /// flags (the few these tests use) set.
    fn args(extra: &[&str]) -> OutboundSettings {
        let mut settings = OutboundSettings {
            webhook_url: None,
            webhook_secret: None,
            webhooks: None,
            amqp_url: None,
            amqp_exchange: DEFAULT_AMQP_EXCHANGE.to_owned(),
            webhook_timeout_ms: 10_000,
            webhook_concurrency: 8,
            webhook_batch: 1,
            outbound_retry_base_ms: 5_000,
            outbound_retry_max_secs: 3_600,
            outbound_give_up_secs: 259_200,
            outbound_hold_grace_secs: 120,
            outbound_allow_private: Vec::new(),
        };
        for pair in extra.chunks(2) {
            let value = pair[1].to_owned();
            match pair[0] {
                "--webhook-url" => settings.webhook_url = Some(value),
                "--webhook-secret" => settings.webhook_secret = Some(value),
                "--webhooks" => settings.webhooks = Some(value.into()),
                "--amqp-url" => settings.amqp_url = Some(value),
                "--webhook-batch" => settings.webhook_batch = value.parse().unwrap(),
                "--outbound-allow-private" => settings.outbound_allow_private.push(value),
                flag => panic!("no such flag in these tests: {flag}"),
            }
        }
        settings
    }

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn message(result: Result<Vec<Endpoint>, EndpointError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn the_simple_form_is_the_default_endpoint() {
        let endpoints = from_settings(&args(&[
            "--webhook-url",
            "https://example.com/hook",
            "--webhook-secret",
            SECRET,
        ]))
        .unwrap();
        assert_eq!(endpoints.len(), 1);
        assert_eq!(endpoints[0].name, "default");
        assert!(endpoints[0].wants("email.opened", None));
    }

    #[test]
    fn bad_settings_are_refused_with_their_name() {
        let bad_scheme = message(from_settings(&args(&[
            "--webhook-url",
            "ftp://example.com/",
            "--webhook-secret",
            SECRET,
        ])));
        assert!(
            bad_scheme.starts_with("LINKTRACK_WEBHOOK_URL:"),
            "{bad_scheme}"
        );
        let bad_secret = message(from_settings(&args(&[
            "--webhook-url",
            "https://example.com/",
            "--webhook-secret",
            "whsec_%%%",
        ])));
        assert!(
            bad_secret.starts_with("LINKTRACK_WEBHOOK_SECRET: not valid base64"),
            "{bad_secret}"
        );
        let no_secret = message(from_settings(&args(&[
            "--webhook-url",
            "https://example.com/",
        ])));
        assert!(
            no_secret.starts_with("LINKTRACK_WEBHOOK_SECRET: missing"),
            "{no_secret}"
        );
        let bad_batch = message(from_settings(&args(&["--webhook-batch", "1001"])));
        assert!(
            bad_batch.starts_with("LINKTRACK_WEBHOOK_BATCH: 1001 events per request"),
            "{bad_batch}"
        );
        let bad_amqp = message(from_settings(&args(&[
            "--amqp-url",
            "amqp://host:notaport",
        ])));
        assert!(bad_amqp.starts_with("LINKTRACK_AMQP_URL:"), "{bad_amqp}");
    }

    #[test]
    fn the_file_names_the_entry_and_key_of_each_mistake() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("webhooks.toml");
        let write = |text: &str| std::fs::write(&path, text).unwrap();
        let file_arg = path.to_str().unwrap().to_owned();
        let run = || from_settings(&args(&["--webhooks", &file_arg]));

        write(&format!(
            "[[endpoint]]\nname = \"crm\"\nurl = \"https://crm.example.com/h\"\nsecret = \"{SECRET}\"\n\
             types = [\"email.clicked\"]\nmailings = [\"spring\"]\nconcurrency = 2\nbatch = 50\n\
             [[endpoint]]\nname = \"pipe\"\nurl = \"amqp://guest:guest@127.0.0.1:5672/%2f\"\n"
        ));
        let endpoints = run().unwrap();
        assert_eq!(endpoints.len(), 2);
        let crm = &endpoints[0];
        assert_eq!(crm.concurrency, 2);
        assert_eq!(crm.batch, 50);
        assert!(crm.wants("email.clicked", Some("spring")));
        assert!(!crm.wants("email.opened", Some("spring")));
        assert!(!crm.wants("email.clicked", Some("autumn")));
        assert!(!crm.wants("email.clicked", None));
        assert!(matches!(endpoints[1].target, Target::Amqp { .. }));
        assert_eq!(endpoints[1].batch, 1);

        write(&format!(
            "[[endpoint]]\nname = \"crm\"\nurl = \"https://x/\"\nsecret = \"{SECRET}\"\nbatch = 0\n"
        ));
        let zero = message(run());
        assert!(
            zero.contains("endpoint 1 (\"crm\"): batch: 0 events"),
            "{zero}"
        );
        write("[[endpoint]]\nname = \"p\"\nurl = \"amqp://127.0.0.1\"\nbatch = 10\n");
        assert!(message(run()).contains("batch: AMQP endpoints publish one message per event"));

        write("[[endpoint]]\nname = \"crm\"\nurl = \"https://crm.example.com/h\"\n");
        let missing = message(run());
        assert!(
            missing.contains("endpoint 1 (\"crm\"): secret: missing"),
            "{missing}"
        );

        write(&format!(
            "[[endpoint]]\nname = \"crm\"\nurl = \"https://x/\"\nsecret = \"{SECRET}\"\ntypes = [\"email.delivered\"]\n"
        ));
        let bad_type = message(run());
        assert!(
            bad_type.contains("types: unknown type \"email.delivered\""),
            "{bad_type}"
        );
        // Bounces and complaints are types like any other.
        write(&format!(
            "[[endpoint]]\nname = \"crm\"\nurl = \"https://x/\"\nsecret = \"{SECRET}\"\n\
             types = [\"email.bounced\", \"email.complained\"]\n"
        ));
        let bounces = run().unwrap();
        assert!(bounces[0].wants("email.complained", Some("spring")));
        assert!(bounces[0].wants("email.bounced", Some("spring")));
        assert!(!bounces[0].wants("email.clicked", Some("spring")));

        write("[[endpoint]]\nname = \"Bad Name\"\nurl = \"https://x/\"\n");
        assert!(message(run()).contains("name: \"Bad Name\""));

        write("[[endpoint]]\nname = \"x\"\nurl = \"https://x/\"\nsecrte = \"typo\"\n");
        assert!(message(run()).contains("secrte"), "an unknown key is named");
    }

    /// A webhook to a private address is refused at start, naming
    /// the endpoint, unless its network is allowed; a bad network is
    /// refused naming the setting.
    #[test]
    fn private_webhook_addresses_are_refused_unless_allowed() {
        for url in [
            "http://2130706433:18555/x",
            "http://[fd00::1]/x",
            "http://127.1/x",
        ] {
            let err = message(from_settings(&args(&[
                "--webhook-url",
                url,
                "--webhook-secret",
                SECRET,
            ])));
            assert!(err.starts_with("endpoint \"default\""), "{err}");
            assert!(err.contains("not a public address"), "{err}");
            assert!(err.contains("--outbound-allow-private"), "{err}");
        }
        let allowed = from_settings(&args(&[
            "--webhook-url",
            "http://2130706433:18555/x",
            "--webhook-secret",
            SECRET,
            "--outbound-allow-private",
            "127.0.0.0/8,fd00::/8",
        ]))
        .unwrap();
        assert!(allowed[0].destinations.allows("127.0.0.1".parse().unwrap()));
        assert!(!allowed[0].destinations.allows("10.0.0.1".parse().unwrap()));
        let err = message(from_settings(&args(&[
            "--outbound-allow-private",
            "10.0.0.0/40",
        ])));
        assert!(
            err.starts_with("LINKTRACK_OUTBOUND_ALLOW_PRIVATE: "),
            "{err}"
        );
    }
}
