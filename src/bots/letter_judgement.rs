//! Verdicts that settle: every hit is journaled at once with a first
//! verdict (`bots`, request signals only), and judged again, with the whole
//! letter in view, once its window has closed, by the rollup
//! (`store::verdicts`), in the transaction that counts it. What the rollup
//! counts is final; nothing on the request path waits for this.
//!
//! The letter-level signals, strongest first:
//! * the request's own (HEAD, no or a scanner's user agent, Apple's bare
//!   `Mozilla/5.0` prefetch, a click on the letter's honeypot link) stay as
//!   the first verdict made them;
//! * a scanner network ([`Networks`]) for the hit's kind;
//! * a click within `honeypot_window` of a click on the honeypot, from any
//!   address (a scanner walks every link, the invisible one too);
//! * a click sooner than `min_click_delay` after the letter's delivery
//!   (the `deliveries` record; the build time when linktrack did not send);
//! * a burst: `burst_links` different links within `burst_window`, every
//!   click of it, the earlier ones too.
//!
//! Opens get a class: `human`, `proxy` (Gmail's and Yahoo's image proxies
//! fetch when the person opens: a real open), `machine` (Apple Mail Privacy
//! Protection prefetches at delivery whether or not anyone reads) or
//! `scanner`. The class is kept in the reason code, so it needs no column.

use super::networks::{Networks, Role};
use crate::kind::EventKind;
use chrono::{DateTime, Utc};
use std::net::IpAddr;
use std::time::Duration;

/// The reason of a click on the honeypot link (set by the click handler).
pub const HONEYPOT: &str = "honeypot";

/// Thresholds of the letter-level judgement.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictRules {
    /// Clicks sooner than this after delivery are bots.
    pub min_click_delay: Duration,
    /// Clicks this close to a honeypot click, either side, are bots.
    pub honeypot_window: Duration,
    /// Different links clicked within this window…
    pub burst_window: Duration,
    /// …this many make a burst.
    pub burst_links: usize,
    /// A hit's verdict is final this long after it happened: the rollup
    /// counts it, and events out send it, only then. Longer than every
    /// window above, so everything that can change it has happened.
    pub settle: Duration,
    pub networks: Networks,
}

impl Default for VerdictRules {
    fn default() -> Self {
        VerdictRules {
            min_click_delay: Duration::from_secs(10),
            honeypot_window: Duration::from_secs(10),
            burst_window: Duration::from_secs(2),
            burst_links: 3,
            settle: Duration::ZERO,
            networks: Networks::shipped(),
        }
    }
}

/// One hit of a letter, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct LetterHit {
    pub kind: EventKind,
    pub at: DateTime<Utc>,
    pub position: Option<u32>,
    pub ip: Option<IpAddr>,
    pub user_agent: Option<String>,
    /// The reason stored with it so far (the first verdict, or a settled one).
    pub reason: Option<String>,
}

/// A verdict: bot or not, and the reason (for a proxy open, its class).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Judged {
    pub bot: bool,
    pub reason: Option<String>,
}

impl Judged {
    fn bot(reason: impl Into<String>) -> Judged {
        let mut reason: String = reason.into();
        reason.truncate(32);
        Judged {
            bot: true,
            reason: Some(reason),
        }
    }

    fn human() -> Judged {
        Judged {
            bot: false,
            reason: None,
        }
    }
}

/// The class of an open (or image load).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpenClass {
    Human,
    Proxy,
    Machine,
    Scanner,
}

impl OpenClass {
    /// The class a stored verdict stands for.
    pub fn of(bot: bool, reason: Option<&str>) -> OpenClass {
        let reason = reason.unwrap_or("");
        match (bot, reason) {
            (false, r) if r.starts_with("proxy:") => OpenClass::Proxy,
            (false, _) => OpenClass::Human,
            (true, r) if r.starts_with("machine:") => OpenClass::Machine,
            (true, _) => OpenClass::Scanner,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OpenClass::Human => "human",
            OpenClass::Proxy => "proxy",
            OpenClass::Machine => "machine",
            OpenClass::Scanner => "scanner",
        }
    }
}

/// Reasons this pass makes (and so may take back); every other reason is
/// the request's (HEAD, no or a scanner's user agent, Apple's prefetch, the
/// honeypot) or an operator's, and stays.
fn made_here(reason: &str) -> bool {
    matches!(reason, "too_fast" | "burst" | "honeypot_window")
        || reason.starts_with("net:")
        || reason.starts_with("proxy:")
}

fn from_the_request(reason: &str) -> bool {
    !made_here(reason)
}

/// How long before the delivery record's time a click still counts as
/// "at delivery": the record's time is when the receiving server's reply
/// was written, and a gateway may fetch while the letter is handed over.
/// A click further before it is a clock out of step, and not judged by delay.
const BEFORE_DELIVERY: chrono::Duration = chrono::Duration::seconds(60);

/// Judge every hit of one letter. `hits` are the letter's hits around the
/// ones being settled (the context), `delivered_at` when it reached the
/// receiving server. Returns one verdict per hit, in order.
pub fn judge_letter(
    rules: &VerdictRules,
    delivered_at: DateTime<Utc>,
    hits: &[LetterHit],
) -> Vec<Judged> {
    let honeypots: Vec<DateTime<Utc>> = hits
        .iter()
        .filter(|h| h.kind == EventKind::Click && h.reason.as_deref() == Some(HONEYPOT))
        .map(|h| h.at)
        .collect();
    let bursts = burst_members(rules, hits);
    hits.iter()
        .zip(bursts)
        .map(|(hit, in_burst)| match hit.kind {
            EventKind::Click => judge_click(rules, delivered_at, &honeypots, in_burst, hit),
            EventKind::Open | EventKind::Image => judge_open(rules, &honeypots, hit),
            EventKind::Unsubscribe => Judged {
                bot: hit.reason.is_some(),
                reason: hit.reason.clone(),
            },
        })
        .collect()
}

fn judge_click(
    rules: &VerdictRules,
    delivered_at: DateTime<Utc>,
    honeypots: &[DateTime<Utc>],
    in_burst: bool,
    hit: &LetterHit,
) -> Judged {
    if let Some(reason) = hit.reason.as_deref().filter(|r| from_the_request(r)) {
        return Judged::bot(reason);
    }
    if let Some((name, Role::Scanner | Role::Machine)) = hit
        .ip
        .and_then(|ip| rules.networks.lookup(ip, EventKind::Click))
    {
        return Judged::bot(format!("net:{name}"));
    }
    if near_any(hit.at, honeypots, rules.honeypot_window) {
        return Judged::bot("honeypot_window");
    }
    let since = hit.at - delivered_at;
    let min = chrono::Duration::from_std(rules.min_click_delay).unwrap_or_default();
    if since > -BEFORE_DELIVERY && since < min {
        return Judged::bot("too_fast");
    }
    if in_burst {
        return Judged::bot("burst");
    }
    Judged::human()
}

fn judge_open(rules: &VerdictRules, honeypots: &[DateTime<Utc>], hit: &LetterHit) -> Judged {
    if let Some(reason) = hit.reason.as_deref().filter(|r| from_the_request(r)) {
        return Judged::bot(reason);
    }
    let lower = hit
        .user_agent
        .as_deref()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let network = hit.ip.and_then(|ip| rules.networks.lookup(ip, hit.kind));
    match network {
        Some((name, Role::Scanner)) => return Judged::bot(format!("net:{name}")),
        Some((name, Role::Machine)) => return Judged::bot(format!("machine:{name}")),
        _ => {}
    }
    if near_any(hit.at, honeypots, rules.honeypot_window) {
        return Judged::bot("honeypot_window");
    }
    let proxy = if lower.contains("googleimageproxy") {
        Some("gmail")
    } else if lower.contains("yahoomailproxy") {
        Some("yahoo")
    } else {
        network.map(|(name, _)| name)
    };
    match proxy {
        Some(name) => Judged {
            bot: false,
            reason: Some(format!("proxy:{name}")),
        },
        None => Judged::human(),
    }
}

fn near_any(at: DateTime<Utc>, marks: &[DateTime<Utc>], window: Duration) -> bool {
    marks
        .iter()
        .any(|mark| (at - *mark).abs().to_std().unwrap_or_default() <= window)
}

/// For each hit: whether it is a click of a burst (some `burst_window`
/// holds it and clicks on `burst_links` different links). The honeypot
/// is not a link of the letter and does not count.
fn burst_members(rules: &VerdictRules, hits: &[LetterHit]) -> Vec<bool> {
    let clicks: Vec<(DateTime<Utc>, u32)> = hits
        .iter()
        .filter(|h| h.kind == EventKind::Click && h.reason.as_deref() != Some(HONEYPOT))
        .filter_map(|h| h.position.map(|p| (h.at, p)))
        .collect();
    let window = chrono::Duration::from_std(rules.burst_window).unwrap_or_default();
    let is_burst_start = |start: DateTime<Utc>| {
        let mut positions: Vec<u32> = clicks
            .iter()
            .filter(|(at, _)| *at >= start && *at <= start + window)
            .map(|(_, p)| *p)
            .collect();
        positions.sort_unstable();
        positions.dedup();
        positions.len() >= rules.burst_links
    };
    let starts: Vec<DateTime<Utc>> = clicks
        .iter()
        .map(|(at, _)| *at)
        .filter(|start| is_burst_start(*start))
        .collect();
    hits.iter()
        .map(|h| {
            h.kind == EventKind::Click
                && h.reason.as_deref() != Some(HONEYPOT)
                && starts
                    .iter()
                    .any(|start| h.at >= *start && h.at <= *start + window)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BROWSER: &str =
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120 Safari/537.36";

    fn t0() -> DateTime<Utc> {
        "2026-11-24T10:00:00Z".parse().unwrap()
    }

    fn click(ms_after: i64, position: u32, ip: &str) -> LetterHit {
        LetterHit {
            kind: EventKind::Click,
            at: t0() + chrono::Duration::milliseconds(ms_after),
            position: Some(position),
            ip: ip.parse().ok(),
            user_agent: Some(BROWSER.into()),
            reason: None,
        }
    }

    fn reasons(judged: &[Judged]) -> Vec<Option<&str>> {
        judged.iter().map(|j| j.reason.as_deref()).collect()
    }

    #[test]
    fn every_click_near_a_honeypot_click_is_a_bot_from_any_address() {
        let rules = VerdictRules::default();
        let mut honeypot = click(35_000, 0, "198.51.100.0");
        honeypot.reason = Some(HONEYPOT.into());
        let hits = [
            click(20_000, 1, "203.0.113.0"),
            honeypot,
            click(38_000, 2, "192.0.2.0"),
            click(600_000, 1, "192.0.2.0"),
        ];
        let judged = judge_letter(&rules, t0() - chrono::Duration::seconds(60), &hits);
        assert_eq!(
            reasons(&judged),
            [None, Some("honeypot"), Some("honeypot_window"), None]
        );
        assert!(judged[1].bot && judged[2].bot && !judged[3].bot);
    }

    #[test]
    fn a_bursts_earlier_clicks_are_bots_too() {
        let rules = VerdictRules::default();
        let hits = [
            click(60_000, 1, "192.0.2.0"),
            click(60_500, 2, "192.0.2.0"),
            click(61_200, 3, "192.0.2.0"),
            click(300_000, 1, "192.0.2.0"),
        ];
        let judged = judge_letter(&rules, t0(), &hits);
        assert_eq!(
            reasons(&judged),
            [Some("burst"), Some("burst"), Some("burst"), None]
        );
    }

    #[test]
    fn seconds_count_from_delivery_and_networks_by_kind() {
        let rules = VerdictRules::default();
        let delivered = t0();
        let hits = [
            click(2_000, 1, "192.0.2.0"),
            click(3_600_000, 1, "40.107.3.0"),
            click(3_600_000, 1, "17.58.0.0"),
        ];
        let judged = judge_letter(&rules, delivered, &hits);
        assert_eq!(
            reasons(&judged),
            [Some("too_fast"), Some("net:microsoft_eop"), None]
        );
    }

    #[test]
    fn opens_have_classes() {
        let rules = VerdictRules::default();
        let open = |agent: &str, ip: &str| LetterHit {
            kind: EventKind::Open,
            user_agent: Some(agent.into()),
            ..click(600_000, 0, ip)
        };
        let hits = [
            open(BROWSER, "192.0.2.0"),
            open(
                "Mozilla/5.0 (via ggpht.com GoogleImageProxy)",
                "66.249.84.0",
            ),
            open("Mozilla/5.0", "17.58.0.0"),
            open(BROWSER, "17.58.0.0"),
            open(BROWSER, "148.163.130.0"),
        ];
        let judged = judge_letter(&rules, t0(), &hits);
        let classes: Vec<OpenClass> = judged
            .iter()
            .map(|j| OpenClass::of(j.bot, j.reason.as_deref()))
            .collect();
        assert_eq!(
            classes,
            [
                OpenClass::Human,
                OpenClass::Proxy,
                OpenClass::Machine,
                OpenClass::Machine,
                OpenClass::Scanner
            ]
        );
        assert_eq!(reasons(&judged)[1], Some("proxy:gmail"));
    }

    #[test]
    fn request_signals_stay() {
        let rules = VerdictRules::default();
        let mut head = click(3_600_000, 1, "192.0.2.0");
        head.reason = Some("head".into());
        let mut fast = click(3_600_000, 2, "192.0.2.0");
        fast.reason = Some("too_fast".into());
        let judged = judge_letter(&rules, t0(), &[head, fast]);
        assert_eq!(reasons(&judged), [Some("head"), None], "too_fast is redone");
    }
}
