//! Human or bot? Every event gets a verdict and, for bots, a short reason
//! code stored in `events.bot_reason`. Nothing is dropped: statistics filter
//! on the verdict, and a wrong verdict can be revisited later.
//!
//! This is the *first* verdict, from the request alone, journaled with the
//! hit; the rollup settles it with the whole letter in view
//! (`letter_judgement`).
//!
//! Signals, strongest first: `HEAD` requests (link checkers), known scanner
//! and link-preview user agents, Apple Mail Privacy Protection's prefetch, clicks
//! within seconds of the letter's build (the token's timestamp *is* the build
//! time, so no human can have read the letter yet), and several different
//! links of one letter clicked within a couple of seconds (a scanner walking
//! every link).
//!
//! Below the store and the journal: pure judgement, no I/O. The rollup's
//! rule that settles verdicts with the whole letter in view is
//! [`letter_judgement`] (the SQL that applies it is `store::verdicts`), the
//! scanner networks they read in [`networks`].

pub mod clients;
pub mod letter_judgement;
pub mod networks;

use crate::kind::EventKind;
use aho_corasick::AhoCorasick;
use chrono::{DateTime, Utc};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Thresholds and lists, with defaults that suit mainstream mailbox providers.
#[derive(Debug, Clone)]
pub struct BotRules {
    /// Lowercase substrings of user agents of scanners and link previewers.
    pub user_agent_markers: Vec<String>,
    /// Clicks sooner than this after the letter's build are bots.
    pub min_click_delay: Duration,
    /// Window in which clicks on different links of one letter count as a burst…
    pub burst_window: Duration,
    /// …and how many different links make a burst.
    pub burst_links: usize,
    /// Letters remembered for burst detection.
    pub burst_letters: u64,
}

impl Default for BotRules {
    fn default() -> Self {
        let markers = [
            "bot",
            "crawler",
            "spider",
            "slackbot",
            "facebookexternalhit",
            "twitterbot",
            "linkedinbot",
            "whatsapp",
            "telegrambot",
            "discordbot",
            "skypeuripreview",
            "barracuda",
            "proofpoint",
            "mimecast",
            "trendmicro",
            "symantec",
            "forcepoint",
            "python-requests",
            "python-urllib",
            "curl",
            "wget",
            "go-http-client",
            "okhttp",
            "java/",
            "libwww-perl",
            "headlesschrome",
            "phantomjs",
        ];
        BotRules {
            user_agent_markers: markers.iter().map(|m| (*m).to_owned()).collect(),
            min_click_delay: Duration::from_secs(5),
            burst_window: Duration::from_secs(2),
            burst_links: 3,
            burst_letters: 100_000,
        }
    }
}

/// The facts a verdict is drawn from.
#[derive(Debug, Clone)]
pub struct Hit<'a> {
    pub kind: EventKind,
    pub is_head: bool,
    pub user_agent: Option<&'a str>,
    /// The client's network (already truncated), when known.
    pub network: Option<IpAddr>,
    /// When the letter was built: the token's timestamp.
    pub built_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
    /// `(mailing, letter, position)` when the link is known.
    pub letter: Option<(&'a str, u64, u32)>,
}

/// The verdict: `None` for a human, else the reason code (at most 32 bytes).
pub type Verdict = Option<String>;

/// Classifies hits; remembers recent clicks per letter for burst detection.
pub struct BotDetector {
    rules: BotRules,
    /// The user agent markers, found in one pass over a user agent whatever
    /// its case (no lowercase copy per hit).
    markers: Option<AhoCorasick>,
    /// This detector's key in each thread's [`SEEN_AGENTS`].
    id: u64,
    recent_clicks: RecentClicks,
}

impl BotDetector {
    pub fn new(rules: BotRules) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        BotDetector {
            markers: case_insensitive(&rules.user_agent_markers),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            recent_clicks: RecentClicks::new(rules.burst_letters),
            rules,
        }
    }

    pub fn classify(&self, hit: &Hit<'_>) -> Verdict {
        let first_marker = |agent: &str| self.first_marker(agent);
        if let Some(reason) = classify_request(&self.rules, first_marker, hit) {
            return Some(reason);
        }
        if hit.kind == EventKind::Click {
            if let Some((mailing, letter, position)) = hit.letter {
                if self.is_burst(mailing, letter, position) {
                    return Some("burst".to_owned());
                }
            }
        }
        None
    }

    /// Record this click and say whether the letter now has clicks on
    /// `burst_links` different links within `burst_window`.
    fn is_burst(&self, mailing: &str, letter: u64, position: u32) -> bool {
        let window = self.rules.burst_window;
        self.recent_clicks
            .with_letter(mailing, letter, |clicks| {
                let now = Instant::now();
                clicks.retain(|(_, at)| now.duration_since(*at) <= window);
                clicks.push((position, now));
                let mut positions: Vec<u32> = clicks.iter().map(|(p, _)| *p).collect();
                positions.sort_unstable();
                positions.dedup();
                positions.len() >= self.rules.burst_links
            })
            .unwrap_or(false)
    }
}

/// Recent clicks (link position, when) of the letters clicked lately, in a
/// fixed table of slots, one letter per slot, chosen by the letter's hash.
/// A letter clicked into a slot another letter holds takes it over: the
/// other's few seconds of history are forgotten, which can only miss a
/// burst, never invent one. Against a cache with eviction (moka, before)
/// this costs no allocation, no key copy and no housekeeping per click,
/// and its memory is fixed by `burst_letters`.
struct RecentClicks {
    slots: Box<[Mutex<Slot>]>,
    hasher: std::hash::RandomState,
}

#[derive(Default)]
struct Slot {
    /// The hash of (mailing, letter) of the letter holding the slot.
    letter: u64,
    clicks: Vec<(u32, Instant)>,
}

impl RecentClicks {
    fn new(letters: u64) -> RecentClicks {
        let slots = usize::try_from(letters)
            .unwrap_or(usize::MAX)
            .clamp(1, 1 << 22);
        RecentClicks {
            slots: (0..slots).map(|_| Mutex::default()).collect(),
            hasher: std::hash::RandomState::new(),
        }
    }

    /// Run `f` on the letter's recent clicks (empty if the slot held
    /// another letter); `None` only if the slot's lock is poisoned.
    fn with_letter<T>(
        &self,
        mailing: &str,
        letter: u64,
        f: impl FnOnce(&mut Vec<(u32, Instant)>) -> T,
    ) -> Option<T> {
        use std::hash::BuildHasher;
        let key = self.hasher.hash_one((mailing, letter));
        // The slot count is not a power of two: the remainder takes every bit.
        let slot = (key % self.slots.len() as u64) as usize;
        let mut slot = self.slots.get(slot)?.lock().ok()?;
        if slot.letter != key {
            slot.letter = key;
            slot.clicks.clear();
        }
        Some(f(&mut slot.clicks))
    }
}

impl BotDetector {
    /// The first marker `agent` contains ([`first_marker`]), remembered
    /// per user agent in this thread's [`SEEN_AGENTS`]: the automaton reads
    /// the whole of a browser's long user agent, and a mail client sends
    /// the same one open after open.
    fn first_marker(&self, agent: &str) -> Option<usize> {
        let hash = agent_hash(self.id, agent.as_bytes());
        let seen = SEEN_AGENTS.try_with(|seen| {
            let seen = seen.try_borrow().ok()?;
            let slot = seen.get(slot_of(hash))?.as_ref()?;
            (slot.detector == self.id && *slot.agent == *agent).then_some(slot.marker)
        });
        if let Ok(Some(marker)) = seen {
            return marker;
        }
        let marker = first_marker(self.markers.as_ref(), agent);
        // Not kept when the thread is ending or its table is in use (never:
        // nothing here calls back into it).
        let _ = SEEN_AGENTS.try_with(|seen| {
            let Ok(mut seen) = seen.try_borrow_mut() else {
                return;
            };
            if seen.is_empty() {
                seen.resize_with(SEEN_SLOTS, || None);
            }
            if let Some(slot) = seen.get_mut(slot_of(hash)) {
                *slot = Some(SeenAgent {
                    detector: self.id,
                    agent: agent.into(),
                    marker,
                });
            }
        });
        marker
    }
}

/// User agents remembered per thread (the server's few worker threads),
/// in a table of slots chosen by hash: a user agent hashed into a slot
/// another holds takes it over, and the other is scanned again when it
/// comes back. No lock, no sharing between threads; at most
/// [`SEEN_SLOTS`] user agents of at most 512 characters
/// (`request::MAX_USER_AGENT_CHARS`) a thread.
const SEEN_SLOTS: usize = 256;

thread_local! {
    static SEEN_AGENTS: std::cell::RefCell<Vec<Option<SeenAgent>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A user agent one detector ([`BotDetector::id`]) has looked at.
struct SeenAgent {
    detector: u64,
    agent: Box<str>,
    marker: Option<usize>,
}

fn slot_of(hash: u64) -> usize {
    // SEEN_SLOTS is a power of two: the top bits, which mix the most.
    (hash >> 56) as usize % SEEN_SLOTS
}

/// A fast hash of a user agent (eight bytes a step) for [`SEEN_AGENTS`].
/// Not keyed: a client that sends user agents colliding in one slot only
/// has them scanned each time, as without the table; the whole agent is
/// compared before a remembered verdict is used.
fn agent_hash(detector: u64, agent: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |hash: u64, word: u64| (hash ^ word).wrapping_mul(K).rotate_left(31);
    let mut hash = step(detector, agent.len() as u64);
    let mut words = agent.chunks_exact(8);
    for chunk in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        hash = step(hash, u64::from_le_bytes(word));
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    step(hash, u64::from_le_bytes(last)).wrapping_mul(K)
}

/// An automaton finding any of `patterns`, ASCII case ignored. Building
/// fails only past size limits far beyond a list of user agent markers;
/// then they go unchecked, said once in the log.
fn case_insensitive<P: AsRef<[u8]>>(patterns: &[P]) -> Option<AhoCorasick> {
    AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build(patterns)
        .inspect_err(
            |err| tracing::error!(%err, "bot markers not usable; user agents go unchecked"),
        )
        .ok()
}

/// The first of `markers`, in the list's order, that `agent` contains.
fn first_marker(markers: Option<&AhoCorasick>, agent: &str) -> Option<usize> {
    markers?
        .find_overlapping_iter(agent)
        .map(|found| found.pattern().as_usize())
        .min()
}

/// The signals visible in one request alone; `first_marker` finds the
/// first of the rules' markers a user agent contains.
fn classify_request(
    rules: &BotRules,
    first_marker: impl FnOnce(&str) -> Option<usize>,
    hit: &Hit<'_>,
) -> Verdict {
    if hit.is_head {
        return Some("head".to_owned());
    }
    let Some(agent) = hit.user_agent.filter(|a| !a.trim().is_empty()) else {
        return Some("no_user_agent".to_owned());
    };
    if matches!(hit.kind, EventKind::Open | EventKind::Image) {
        if let Some(reason) = image_proxy(agent, hit.network) {
            return Some(reason.to_owned());
        }
    }
    if let Some(marker) = first_marker(agent).and_then(|n| rules.user_agent_markers.get(n)) {
        let mut reason = format!("ua:{marker}");
        reason.truncate(32);
        return Some(reason);
    }
    if hit.kind == EventKind::Click {
        let since_build = (hit.now - hit.built_at).to_std().unwrap_or_default();
        if since_build < rules.min_click_delay {
            return Some("too_fast".to_owned());
        }
    }
    None
}

/// Apple Mail Privacy Protection prefetches pixels whether or not anyone
/// reads: a machine open. (Gmail's image proxy fetches when the person opens:
/// a real open, classed `proxy` when the verdict settles, see `letter_judgement`.)
fn image_proxy(agent: &str, network: Option<IpAddr>) -> Option<&'static str> {
    // A bare "Mozilla/5.0", or Apple's own 17.0.0.0/8.
    let from_apple = matches!(network, Some(IpAddr::V4(v4)) if v4.octets()[0] == 17);
    if agent.trim().eq_ignore_ascii_case("mozilla/5.0") || from_apple {
        return Some("machine:apple_mpp");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const BROWSER: &str =
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120 Safari/537.36";

    fn hit(kind: EventKind, agent: &str, seconds_after_build: i64) -> Hit<'_> {
        let now = Utc::now();
        Hit {
            kind,
            is_head: false,
            user_agent: Some(agent),
            network: None,
            built_at: now - chrono::Duration::seconds(seconds_after_build),
            now,
            letter: None,
        }
    }

    #[test]
    fn each_signal_has_its_reason() {
        let d = BotDetector::new(BotRules::default());
        let late = 3_600;
        assert_eq!(d.classify(&hit(EventKind::Click, BROWSER, late)), None);
        let head = Hit {
            is_head: true,
            ..hit(EventKind::Click, BROWSER, late)
        };
        assert_eq!(d.classify(&head).as_deref(), Some("head"));
        let slack = hit(EventKind::Click, "Slackbot-LinkExpanding 1.0", late);
        assert_eq!(d.classify(&slack).as_deref(), Some("ua:bot"));
        let shouting = hit(
            EventKind::Click,
            "Mozilla/5.0 (compatible; BINGBOT/2.0)",
            late,
        );
        assert_eq!(d.classify(&shouting).as_deref(), Some("ua:bot"));
        let curl = hit(EventKind::Click, "curl/8.5.0", late);
        assert_eq!(d.classify(&curl).as_deref(), Some("ua:curl"));
        let gmail = hit(
            EventKind::Open,
            "Mozilla/5.0 (via ggpht.com GoogleImageProxy)",
            late,
        );
        assert_eq!(
            d.classify(&gmail),
            None,
            "Gmail's proxy fetches for a reader"
        );
        let apple = hit(EventKind::Open, "Mozilla/5.0", late);
        assert_eq!(d.classify(&apple).as_deref(), Some("machine:apple_mpp"));
        let from_apple = Hit {
            network: "17.58.0.0".parse().ok(),
            ..hit(EventKind::Open, BROWSER, late)
        };
        assert_eq!(
            d.classify(&from_apple).as_deref(),
            Some("machine:apple_mpp")
        );
        let apple_click = Hit {
            network: "17.58.0.0".parse().ok(),
            ..hit(EventKind::Click, BROWSER, late)
        };
        assert_eq!(d.classify(&apple_click), None, "only opens are prefetched");
        let fast = hit(EventKind::Click, BROWSER, 1);
        assert_eq!(d.classify(&fast).as_deref(), Some("too_fast"));
        let none = Hit {
            user_agent: None,
            ..hit(EventKind::Open, BROWSER, late)
        };
        assert_eq!(d.classify(&none).as_deref(), Some("no_user_agent"));
    }

    /// A user agent's verdict is remembered per detector: the same agent
    /// again reads the same, and another detector's rules are its own.
    #[test]
    fn remembered_user_agents_keep_each_detectors_verdict() {
        let curl_only = BotDetector::new(BotRules {
            user_agent_markers: vec!["curl".to_owned()],
            ..BotRules::default()
        });
        let default = BotDetector::new(BotRules::default());
        let late = 3_600;
        for _ in 0..3 {
            for agent in [BROWSER, "Slackbot 1.0", "curl/8.5.0", "CURL/8.5.0"] {
                let open = hit(EventKind::Open, agent, late);
                let fresh = BotDetector::new(BotRules::default()).classify(&open);
                assert_eq!(default.classify(&open), fresh, "{agent}");
            }
            let slack = hit(EventKind::Open, "Slackbot 1.0", late);
            assert_eq!(curl_only.classify(&slack), None);
            assert_eq!(default.classify(&slack).as_deref(), Some("ua:bot"));
            let curl = hit(EventKind::Open, "curl/8.5.0", late);
            assert_eq!(curl_only.classify(&curl).as_deref(), Some("ua:curl"));
        }
        // Agents sharing a slot take it from each other, verdicts intact.
        let agents: Vec<String> = (0..4 * SEEN_SLOTS)
            .map(|n| {
                if n % 3 == 0 {
                    format!("bot {n}")
                } else {
                    format!("Mail {n}")
                }
            })
            .collect();
        for _ in 0..2 {
            for (n, agent) in agents.iter().enumerate() {
                let verdict = default.classify(&hit(EventKind::Open, agent, late));
                assert_eq!(verdict.is_some(), n % 3 == 0, "{agent}");
            }
        }
    }

    #[test]
    fn different_links_of_one_letter_in_a_burst_are_bots() {
        let d = BotDetector::new(BotRules::default());
        let click = |position| Hit {
            letter: Some(("m", 7, position)),
            ..hit(EventKind::Click, BROWSER, 3_600)
        };
        assert_eq!(d.classify(&click(1)), None);
        assert_eq!(
            d.classify(&click(1)),
            None,
            "the same link twice is no burst"
        );
        assert_eq!(d.classify(&click(2)), None);
        assert_eq!(d.classify(&click(3)).as_deref(), Some("burst"));
        let other_letter = Hit {
            letter: Some(("m", 8, 4)),
            ..click(4)
        };
        assert_eq!(d.classify(&other_letter), None);
    }

    /// With one slot every letter takes it from the last: history is lost,
    /// but clicks of two letters never add up to one letter's burst.
    #[test]
    fn letters_sharing_a_slot_never_make_a_burst_together() {
        let d = BotDetector::new(BotRules {
            burst_letters: 1,
            ..BotRules::default()
        });
        let click = |letter, position| Hit {
            letter: Some(("m", letter, position)),
            ..hit(EventKind::Click, BROWSER, 3_600)
        };
        for (letter, position) in [(7, 1), (8, 2), (7, 3), (8, 4), (7, 5)] {
            assert_eq!(d.classify(&click(letter, position)), None);
        }
        assert_eq!(d.classify(&click(7, 6)), None);
        assert_eq!(d.classify(&click(7, 7)).as_deref(), Some("burst"));
    }
}
