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
//! * a time-of-click check: a click followed within `check_window` by a
//!   click on the same link from another network (a gateway fetching the
//!   target just before it lets the person through);
//! * a walk: clicks on `walk_links` different links within
//!   `min_click_delay`, from networks no person of the letter opened from
//!   (a scanner following the visible links, from one address or many);
//! * a click sooner than `min_click_delay` after the letter's delivery
//!   (the `deliveries` record; the build time when linktrack did not send),
//!   unless it looks like a person's (`looks_like_a_person`): a fast
//!   reader is not a bot for being fast alone;
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
use std::collections::{BTreeMap, HashMap};
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
    /// A click followed this soon by a click on the same link from another
    /// network is a gateway's time-of-click check.
    pub check_window: Duration,
    /// Different links clicked within `min_click_delay`, from networks no
    /// person of the letter opened from, that make a walk.
    pub walk_links: usize,
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
            check_window: Duration::from_secs(5),
            walk_links: 4,
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
    pub user_agent: Option<std::sync::Arc<str>>,
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
    matches!(
        reason,
        "too_fast" | "burst" | "honeypot_window" | "time_of_click" | "walk"
    ) || reason.starts_with("net:")
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
    let hits: Vec<&LetterHit> = hits.iter().collect();
    judge_first(rules, delivered_at, &hits, hits.len())
}

/// The verdicts [`judge_letter`] gives the first `first` of `hits` (the
/// ones being settled), the others in view as their context. Each check
/// is a look-up in indexes built once per letter, so the work grows with
/// the letter's hits, not with hits × hits: a hot letter has hundreds,
/// and the settle pass judges it again for every batch that holds one.
pub fn judge_first(
    rules: &VerdictRules,
    delivered_at: DateTime<Utc>,
    hits: &[&LetterHit],
    first: usize,
) -> Vec<Judged> {
    let mut honeypots: Vec<&LetterHit> = hits
        .iter()
        .copied()
        .filter(|h| h.kind == EventKind::Click && h.reason.as_deref() == Some(HONEYPOT))
        .collect();
    honeypots.sort_by_key(|h| h.at);
    let clicks: Vec<&LetterHit> = hits
        .iter()
        .copied()
        .filter(|h| {
            h.kind == EventKind::Click
                && h.reason.as_deref() != Some(HONEYPOT)
                && !listed_or_flagged(rules, h)
        })
        .collect();
    let mut human_opens: HashMap<IpAddr, DateTime<Utc>> = HashMap::new();
    let mut first_proxy_open: Option<DateTime<Utc>> = None;
    for open in hits
        .iter()
        .filter(|h| matches!(h.kind, EventKind::Open | EventKind::Image))
    {
        let judged = judge_open(rules, &honeypots, &clicks, open);
        match OpenClass::of(judged.bot, judged.reason.as_deref()) {
            OpenClass::Human => {
                if let Some(ip) = open.ip {
                    let first = human_opens.entry(ip).or_insert(open.at);
                    *first = (*first).min(open.at);
                }
            }
            OpenClass::Proxy => {
                first_proxy_open = Some(first_proxy_open.map_or(open.at, |t| t.min(open.at)));
            }
            OpenClass::Machine | OpenClass::Scanner => {}
        }
    }
    let mut letter = Letter {
        delivered_at,
        honeypots,
        human_opens,
        first_proxy_open,
        click_links: Links::default(),
        stranger_links: Links::default(),
    };
    letter.click_links = Links::of(clicks.iter().copied());
    // Once per letter, not once per click judged.
    letter.stranger_links = Links::of(
        clicks
            .iter()
            .copied()
            .filter(|c| !letter.opened_by_a_person(c.ip, c.at, false)),
    );
    let bursts = Bursts::of(rules, hits);
    hits.iter()
        .take(first)
        .map(|hit| match hit.kind {
            EventKind::Click => judge_click(rules, &letter, bursts.holds(hit), hit),
            EventKind::Open | EventKind::Image => {
                judge_open(rules, &letter.honeypots, &clicks, hit)
            }
            EventKind::Unsubscribe => Judged {
                bot: hit.reason.is_some(),
                reason: hit.reason.clone(),
            },
        })
        .collect()
}

/// What a click is judged against: the letter's other hits.
struct Letter<'a> {
    delivered_at: DateTime<Utc>,
    /// Clicks on the honeypot link, by time.
    honeypots: Vec<&'a LetterHit>,
    /// The first `human` open (or image load) from each network.
    human_opens: HashMap<IpAddr, DateTime<Utc>>,
    /// The first open a provider's proxy fetched for the person.
    first_proxy_open: Option<DateTime<Utc>>,
    /// Clicks on the letter's links that no request signal or listed
    /// network already calls a machine's.
    click_links: Links,
    /// Those of them from a network no person of the letter had opened it
    /// from by then (a walk's candidates).
    stranger_links: Links,
}

impl Letter<'_> {
    /// Whether a person opened the letter, pictures shown, from `ip`'s
    /// network by `at` (a `human` open from that network, or a provider's
    /// proxy fetching for the person, from any). Apple's prefetch and a
    /// scanner's fetch are no one's reading.
    fn opened_by_a_person(&self, ip: Option<IpAddr>, at: DateTime<Utc>, proxy_too: bool) -> bool {
        ip.and_then(|ip| self.human_opens.get(&ip))
            .is_some_and(|first| *first <= at)
            || (proxy_too && self.first_proxy_open.is_some_and(|first| first <= at))
    }
}

/// Clicks by link (position), each link's by time: which links were
/// clicked near a time, and whether a link was clicked again soon from
/// another network, in a binary search each.
#[derive(Default)]
struct Links {
    by_position: BTreeMap<u32, LinkClicks>,
}

/// A click's time and network.
type Click = (DateTime<Utc>, Option<IpAddr>);

#[derive(Default)]
struct LinkClicks {
    at: Vec<DateTime<Utc>>,
    ip: Vec<Option<IpAddr>>,
    /// For each click, the next one (in time) from another network than
    /// its own; `at.len()` when there is none.
    next_other_ip: Vec<usize>,
}

impl Links {
    fn of<'h>(clicks: impl Iterator<Item = &'h LetterHit>) -> Links {
        let mut by_position: BTreeMap<u32, Vec<Click>> = BTreeMap::new();
        for click in clicks {
            if let Some(position) = click.position {
                by_position
                    .entry(position)
                    .or_default()
                    .push((click.at, click.ip));
            }
        }
        let by_position = by_position
            .into_iter()
            .map(|(position, mut clicks)| {
                clicks.sort_by_key(|c| c.0);
                let mut next_other_ip = vec![clicks.len(); clicks.len()];
                for i in (0..clicks.len().saturating_sub(1)).rev() {
                    next_other_ip[i] = if clicks[i + 1].1 != clicks[i].1 {
                        i + 1
                    } else {
                        next_other_ip[i + 1]
                    };
                }
                let (at, ip) = clicks.into_iter().unzip();
                (
                    position,
                    LinkClicks {
                        at,
                        ip,
                        next_other_ip,
                    },
                )
            })
            .collect();
        Links { by_position }
    }

    /// The different links clicked within `window` of `at`, counted up to
    /// `enough` (the callers only compare with a threshold).
    fn near(&self, at: DateTime<Utc>, window: chrono::Duration, enough: usize) -> usize {
        let (from, to) = (earlier(at, window), later(at, window));
        let mut found = 0;
        for clicks in self.by_position.values() {
            if found >= enough {
                break;
            }
            let i = clicks.at.partition_point(|t| *t < from);
            if clicks.at.get(i).is_some_and(|t| *t <= to) {
                found += 1;
            }
        }
        found
    }

    /// Whether link `position` was clicked after `at`, within `window`,
    /// from another network than `ip`.
    fn clicked_again_elsewhere(
        &self,
        position: u32,
        at: DateTime<Utc>,
        window: chrono::Duration,
        ip: Option<IpAddr>,
    ) -> bool {
        let Some(clicks) = self.by_position.get(&position) else {
            return false;
        };
        let k = clicks.at.partition_point(|t| *t <= at);
        let Some(first_ip) = clicks.ip.get(k) else {
            return false;
        };
        let j = if *first_ip != ip {
            k
        } else {
            clicks.next_other_ip[k]
        };
        clicks.at.get(j).is_some_and(|t| *t - at <= window)
    }
}

/// The hits of `by_time` (in time order) within `window` of `at`, found by
/// two binary searches: judged click by click and open by open, a scan
/// of a letter's honeypot clicks made its hits × its honeypot clicks.
fn within<'a, 'h>(
    by_time: &'a [&'h LetterHit],
    at: DateTime<Utc>,
    window: chrono::Duration,
) -> &'a [&'h LetterHit] {
    let (from, to) = (earlier(at, window), later(at, window));
    let start = by_time.partition_point(|h| h.at < from);
    let end = by_time.partition_point(|h| h.at <= to).max(start);
    &by_time[start..end]
}

/// `at - window`, the earliest time when that is out of range.
fn earlier(at: DateTime<Utc>, window: chrono::Duration) -> DateTime<Utc> {
    at.checked_sub_signed(window)
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// `at + window`, the latest time when that is out of range.
fn later(at: DateTime<Utc>, window: chrono::Duration) -> DateTime<Utc> {
    at.checked_add_signed(window)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A click the request's own signals or a listed scanner network already
/// call a machine's: not counted among the letter's clicks a person
/// might have made.
fn listed_or_flagged(rules: &VerdictRules, hit: &LetterHit) -> bool {
    hit.reason.as_deref().is_some_and(from_the_request)
        || matches!(
            hit.ip
                .and_then(|ip| rules.networks.lookup(ip, EventKind::Click)),
            Some((_, Role::Scanner | Role::Machine))
        )
}

/// A browser's user agent: `Mozilla/5.0 (platform)` and a rendering engine.
/// Scanners often send one too; this alone proves nothing, its absence
/// (a bare or a library's agent) is a machine's sign.
fn browser_agent(agent: Option<&str>) -> bool {
    let Some(agent) = agent else {
        return false;
    };
    let Some(rest) = agent.trim().strip_prefix("Mozilla/5.0 (") else {
        return false;
    };
    let Some((platform, engine)) = rest.split_once(')') else {
        return false;
    };
    platform.len() >= 4
        && ["AppleWebKit/", "Gecko/", "Trident/", "Gecko)"]
            .iter()
            .any(|marker| engine.contains(marker))
}

/// Whether a click that a time window alone would call a bot's looks like
/// a person's in every other respect: a browser's user agent, the letter
/// opened with pictures by a person before it (from the click's network,
/// or through a provider's proxy), and no more than two different links
/// clicked around it by anyone not already known to be a machine (a person
/// reading fast clicks one or two; a scanner follows them all).
fn looks_like_a_person(rules: &VerdictRules, letter: &Letter<'_>, hit: &LetterHit) -> bool {
    let window = chrono::Duration::from_std(rules.min_click_delay).unwrap_or_default();
    browser_agent(hit.user_agent.as_deref())
        && letter.opened_by_a_person(hit.ip, hit.at, true)
        && letter.click_links.near(hit.at, window, 3) <= 2
}

fn judge_click(
    rules: &VerdictRules,
    letter: &Letter<'_>,
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
    let honeypot_window = chrono::Duration::from_std(rules.honeypot_window).unwrap_or_default();
    let near_honeypots = within(&letter.honeypots, hit.at, honeypot_window);
    // A person's click near a scanner's honeypot click, from another
    // network (Safe Links walks the letter as the reader opens it), is
    // the person's.
    if !near_honeypots.is_empty()
        && (near_honeypots.iter().any(|h| h.ip == hit.ip)
            || !looks_like_a_person(rules, letter, hit))
    {
        return Judged::bot("honeypot_window");
    }
    if time_of_click_check(rules, letter, hit) {
        return Judged::bot("time_of_click");
    }
    if walk(rules, letter, hit) {
        return Judged::bot("walk");
    }
    let since = hit.at - letter.delivered_at;
    let min = chrono::Duration::from_std(rules.min_click_delay).unwrap_or_default();
    if since > -BEFORE_DELIVERY && since < min && !looks_like_a_person(rules, letter, hit) {
        return Judged::bot("too_fast");
    }
    if in_burst {
        return Judged::bot("burst");
    }
    Judged::human()
}

/// A gateway's time-of-click check: the same link clicked again from
/// another network within `check_window` after this click (the gateway
/// fetches the target, then lets the person through), and no person
/// opened the letter from this click's network.
fn time_of_click_check(rules: &VerdictRules, letter: &Letter<'_>, hit: &LetterHit) -> bool {
    let window = chrono::Duration::from_std(rules.check_window).unwrap_or_default();
    hit.position.is_some_and(|position| {
        !letter.opened_by_a_person(hit.ip, hit.at, false)
            && letter
                .click_links
                .clicked_again_elsewhere(position, hit.at, window, hit.ip)
    })
}

/// A walk over the letter's links: clicks on `walk_links` different links
/// within `min_click_delay` of this one, from networks no person of the
/// letter opened from (one address or many), this click among them.
fn walk(rules: &VerdictRules, letter: &Letter<'_>, hit: &LetterHit) -> bool {
    let window = chrono::Duration::from_std(rules.min_click_delay).unwrap_or_default();
    !letter.opened_by_a_person(hit.ip, hit.at, false)
        && letter.stranger_links.near(hit.at, window, rules.walk_links) >= rules.walk_links
}

fn judge_open(
    rules: &VerdictRules,
    honeypots: &[&LetterHit],
    clicks: &[&LetterHit],
    hit: &LetterHit,
) -> Judged {
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
    if near_honeypot_open(rules, honeypots, clicks, hit) {
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

/// An open within `honeypot_window` of a honeypot click is a scanner's,
/// unless it comes from another network than every such click, with a
/// browser's user agent, and its network clicked no more than two links
/// around it (a person opening the letter while a gateway walks it).
/// `honeypots` are in time order.
fn near_honeypot_open(
    rules: &VerdictRules,
    honeypots: &[&LetterHit],
    clicks: &[&LetterHit],
    hit: &LetterHit,
) -> bool {
    let window = chrono::Duration::from_std(rules.honeypot_window).unwrap_or_default();
    let near = within(honeypots, hit.at, window);
    if near.is_empty() {
        return false;
    }
    let mut links: Vec<u32> = clicks
        .iter()
        .filter(|c| c.ip == hit.ip && (c.at - hit.at).abs() <= window)
        .filter_map(|c| c.position)
        .collect();
    links.sort_unstable();
    links.dedup();
    near.iter().any(|h| h.ip == hit.ip)
        || hit.ip.is_none()
        || !browser_agent(hit.user_agent.as_deref())
        || links.len() > 2
}

/// The clicks of bursts: a click is one when some `burst_window`
/// holds it and clicks on `burst_links` different links. The honeypot
/// is not a link of the letter and does not count, nor do clicks a request
/// signal or a listed network already calls a machine's: a person clicking
/// while Safe Links walks the letter makes no burst with it.
struct Bursts {
    /// The times that start a burst's window, in order.
    starts: Vec<DateTime<Utc>>,
    window: chrono::Duration,
}

impl Bursts {
    /// Every click's time tried as a window's start, the window slid over
    /// the clicks in time order with a count per link.
    fn of(rules: &VerdictRules, hits: &[&LetterHit]) -> Bursts {
        let mut clicks: Vec<(DateTime<Utc>, u32)> = hits
            .iter()
            .filter(|h| h.kind == EventKind::Click && h.reason.as_deref() != Some(HONEYPOT))
            .filter(|h| !listed_or_flagged(rules, h))
            .filter_map(|h| h.position.map(|p| (h.at, p)))
            .collect();
        clicks.sort_unstable();
        let window = chrono::Duration::from_std(rules.burst_window).unwrap_or_default();
        let mut in_window: HashMap<u32, usize> = HashMap::new();
        let (mut first, mut past) = (0, 0);
        let mut starts: Vec<DateTime<Utc>> = Vec::new();
        for (n, (start, _)) in clicks.iter().enumerate() {
            if n > 0 && clicks[n - 1].0 == *start {
                continue;
            }
            while let Some((_, position)) = clicks.get(first).filter(|(at, _)| at < start) {
                if let Some(count) = in_window.get_mut(position) {
                    *count -= 1;
                    if *count == 0 {
                        in_window.remove(position);
                    }
                }
                first += 1;
            }
            let end = later(*start, window);
            while let Some((_, position)) = clicks.get(past).filter(|(at, _)| *at <= end) {
                *in_window.entry(*position).or_default() += 1;
                past += 1;
            }
            if in_window.len() >= rules.burst_links {
                starts.push(*start);
            }
        }
        Bursts { starts, window }
    }

    /// Whether `hit` is a click of a burst.
    fn holds(&self, hit: &LetterHit) -> bool {
        if hit.kind != EventKind::Click || hit.reason.as_deref() == Some(HONEYPOT) {
            return false;
        }
        let n = self.starts.partition_point(|start| *start <= hit.at);
        n > 0
            && self
                .starts
                .get(n - 1)
                .is_some_and(|start| hit.at <= later(*start, self.window))
    }
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

    #[test]
    fn within_finds_the_hits_of_a_window_ends_included() {
        let at = |s: i64| t0() + chrono::Duration::seconds(s);
        let hits: Vec<LetterHit> = [0, 5, 10, 10, 20, 31]
            .iter()
            .map(|s| LetterHit {
                kind: EventKind::Click,
                at: at(*s),
                position: None,
                ip: None,
                user_agent: None,
                reason: None,
            })
            .collect();
        let by_time: Vec<&LetterHit> = hits.iter().collect();
        let seconds = |found: &[&LetterHit]| -> Vec<i64> {
            found.iter().map(|h| (h.at - t0()).num_seconds()).collect()
        };
        let window = chrono::Duration::seconds(10);
        assert_eq!(
            seconds(within(&by_time, at(10), window)),
            [0, 5, 10, 10, 20]
        );
        assert_eq!(seconds(within(&by_time, at(21), window)), [20, 31]);
        assert!(within(&by_time, at(100), window).is_empty());
        assert!(within(&[], at(0), window).is_empty());
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

    fn open_at(ms_after: i64, ip: &str) -> LetterHit {
        LetterHit {
            kind: EventKind::Open,
            position: None,
            ..click(ms_after, 0, ip)
        }
    }

    /// A person who opens the letter as it arrives and clicks a link
    /// within the fast window is a person: the window alone is not enough.
    /// The same click with no one's open, a library's agent, or among many
    /// links clicked is too fast.
    #[test]
    fn a_fast_reader_with_nothing_machine_like_is_a_person() {
        let rules = VerdictRules::default();
        let home = "86.85.99.0";
        let reader = [open_at(2_000, home), click(5_000, 3, home)];
        let judged = judge_letter(&rules, t0(), &reader);
        assert_eq!(reasons(&judged), [None, None]);
        assert!(!judged[1].bot);

        let no_open = [click(5_000, 3, home)];
        assert_eq!(
            reasons(&judge_letter(&rules, t0(), &no_open)),
            [Some("too_fast")]
        );
        let mut library = click(5_000, 3, home);
        library.user_agent = Some("Mozilla/5.0".into());
        let judged = judge_letter(&rules, t0(), &[open_at(2_000, home), library]);
        assert_eq!(reasons(&judged)[1], Some("too_fast"));
        let elsewhere = [open_at(2_000, "151.59.14.0"), click(5_000, 3, home)];
        assert_eq!(
            reasons(&judge_letter(&rules, t0(), &elsewhere))[1],
            Some("too_fast"),
            "a person's open from another network"
        );
        // Gmail's proxy fetches the pixel for the person, from Google.
        let mut proxied = open_at(2_000, "66.249.84.0");
        proxied.user_agent = Some("Mozilla/5.0 (via ggpht.com GoogleImageProxy)".into());
        let judged = judge_letter(&rules, t0(), &[proxied, click(5_000, 3, home)]);
        assert_eq!(reasons(&judged), [Some("proxy:gmail"), None]);
        // Three links in the window: a scanner, not a reader.
        let many = [
            open_at(1_000, home),
            click(3_000, 1, home),
            click(5_500, 2, home),
            click(8_000, 3, home),
        ];
        let judged = judge_letter(&rules, t0(), &many);
        assert_eq!(
            reasons(&judged)[1..],
            [Some("too_fast"), Some("too_fast"), Some("too_fast")]
        );
    }

    /// A gateway fetching the link just before the person's own click is
    /// a bot; the person's click, fast or not, is not.
    #[test]
    fn a_time_of_click_check_before_a_persons_click_is_the_bot() {
        let rules = VerdictRules::default();
        let home = "92.14.7.0";
        let gateway = "20.61.12.0";
        let late = [
            open_at(3_600_000, home),
            click(3_605_000, 4, gateway),
            click(3_605_700, 4, home),
        ];
        let judged = judge_letter(&rules, t0(), &late);
        assert_eq!(reasons(&judged), [None, Some("time_of_click"), None]);
        let fast = [
            open_at(2_000, home),
            click(6_000, 4, gateway),
            click(6_400, 4, home),
        ];
        let judged = judge_letter(&rules, t0(), &fast);
        assert_eq!(reasons(&judged), [None, Some("time_of_click"), None]);
        // Two people? A person clicking on after clicking from the same
        // network is no check; a click of another link is no check.
        let other_link = [click(3_605_000, 5, gateway), click(3_605_700, 4, home)];
        assert_eq!(
            reasons(&judge_letter(&rules, t0(), &other_link)),
            [None, None]
        );
    }

    /// A scanner from home addresses following only the visible links,
    /// slowly enough to make no burst and past the fast window: a walk,
    /// from one address or one address a link.
    #[test]
    fn a_stealth_scanner_walking_the_visible_links_is_a_bot() {
        let rules = VerdictRules::default();
        let one: Vec<LetterHit> = (0..8)
            .map(|n| click(20_000 + n * 1_600, n as u32 + 1, "176.33.2.0"))
            .collect();
        let judged = judge_letter(&rules, t0(), &one);
        assert!(judged.iter().all(|j| j.reason.as_deref() == Some("walk")));
        let many: Vec<LetterHit> = (0..8)
            .map(|n| click(20_000 + n * 1_600, n as u32 + 1, &format!("188.{n}.2.0")))
            .collect();
        let judged = judge_letter(&rules, t0(), &many);
        assert!(judged.iter().all(|j| j.reason.as_deref() == Some("walk")));
        // A reader who opened and clicks four links in ten seconds reads.
        let mut reader = vec![open_at(15_000, "176.33.2.0")];
        reader.extend((0..4).map(|n| click(20_000 + n * 2_500, n as u32 + 1, "176.33.2.0")));
        let judged = judge_letter(&rules, t0(), &reader);
        assert!(judged.iter().all(|j| !j.bot), "{judged:?}");
    }

    /// Safe Links walks the letter, honeypot too, as the person opens and
    /// clicks: the person's open and click, from their own network, are
    /// theirs; a click from the honeypot's own network is not.
    #[test]
    fn a_person_reading_while_a_gateway_walks_the_letter_is_a_person() {
        let rules = VerdictRules::default();
        let home = "81.20.30.0";
        let mut honeypot = click(2_500, 0, "34.90.1.0");
        honeypot.reason = Some(HONEYPOT.into());
        let hits = [
            honeypot,
            click(2_700, 5, "34.90.1.0"),
            open_at(3_000, home),
            click(7_000, 2, home),
        ];
        let judged = judge_letter(&rules, t0(), &hits);
        assert_eq!(
            reasons(&judged),
            [Some("honeypot"), Some("honeypot_window"), None, None]
        );
    }

    /// Clicks of a listed scanner make no burst with a person's click.
    #[test]
    fn a_listed_scanners_clicks_make_no_burst_with_a_persons() {
        let rules = VerdictRules::default();
        let home = "86.85.99.0";
        let hits = [
            click(600_000, 1, "40.107.3.0"),
            click(600_400, 2, "40.107.9.0"),
            open_at(600_500, home),
            click(600_900, 3, home),
        ];
        let judged = judge_letter(&rules, t0(), &hits);
        assert_eq!(
            reasons(&judged),
            [
                Some("net:microsoft_eop"),
                Some("net:microsoft_eop"),
                None,
                None
            ]
        );
    }
}
