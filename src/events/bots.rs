//! Human or bot? Every event gets a verdict and, for bots, a short reason
//! code stored in `events.bot_reason`. Nothing is dropped: statistics filter
//! on the verdict, and a wrong verdict can be revisited later.
//!
//! Signals, strongest first: `HEAD` requests (link checkers), known scanner
//! and link-preview user agents, image proxies that fetch every image of a
//! letter (Gmail's `GoogleImageProxy`, Apple Mail Privacy Protection), clicks
//! within seconds of the letter's build (the token's timestamp *is* the build
//! time, so no human can have read the letter yet), and several different
//! links of one letter clicked within a couple of seconds (a scanner walking
//! every link).

use crate::kind::EventKind;
use chrono::{DateTime, Utc};
use moka::future::Cache;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
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

/// Recent clicks of one letter: link position and when.
type RecentClicks = Arc<Mutex<Vec<(u32, Instant)>>>;

/// Classifies hits; remembers recent clicks per letter for burst detection.
pub struct BotDetector {
    rules: BotRules,
    /// Keyed by (mailing, letter).
    recent_clicks: Cache<(String, u64), RecentClicks>,
}

impl BotDetector {
    pub fn new(rules: BotRules) -> Self {
        let recent_clicks = Cache::builder()
            .max_capacity(rules.burst_letters)
            .time_to_idle(rules.burst_window * 2)
            .build();
        BotDetector {
            rules,
            recent_clicks,
        }
    }

    pub async fn classify(&self, hit: &Hit<'_>) -> Verdict {
        if let Some(reason) = classify_request(&self.rules, hit) {
            return Some(reason);
        }
        if hit.kind == EventKind::Click {
            if let Some((mailing, letter, position)) = hit.letter {
                if self.is_burst(mailing, letter, position).await {
                    return Some("burst".to_owned());
                }
            }
        }
        None
    }

    /// Record this click and say whether the letter now has clicks on
    /// `burst_links` different links within `burst_window`.
    async fn is_burst(&self, mailing: &str, letter: u64, position: u32) -> bool {
        let clicks = self
            .recent_clicks
            .get_with((mailing.to_owned(), letter), async { Arc::default() })
            .await;
        let now = Instant::now();
        let Ok(mut clicks) = clicks.lock() else {
            return false;
        };
        clicks.retain(|(_, at)| now.duration_since(*at) <= self.rules.burst_window);
        clicks.push((position, now));
        let mut positions: Vec<u32> = clicks.iter().map(|(p, _)| *p).collect();
        positions.sort_unstable();
        positions.dedup();
        positions.len() >= self.rules.burst_links
    }
}

/// The signals visible in one request alone.
fn classify_request(rules: &BotRules, hit: &Hit<'_>) -> Verdict {
    if hit.is_head {
        return Some("head".to_owned());
    }
    let Some(agent) = hit.user_agent.filter(|a| !a.trim().is_empty()) else {
        return Some("no_user_agent".to_owned());
    };
    let lower = agent.to_ascii_lowercase();
    if matches!(hit.kind, EventKind::Open | EventKind::Image) {
        if let Some(reason) = image_proxy(&lower, hit.network) {
            return Some(reason.to_owned());
        }
    }
    if let Some(marker) = rules
        .user_agent_markers
        .iter()
        .find(|m| lower.contains(m.as_str()))
    {
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

/// Mail providers' image proxies fetch pixels whether or not anyone reads.
fn image_proxy(lower_agent: &str, network: Option<IpAddr>) -> Option<&'static str> {
    if lower_agent.contains("googleimageproxy") {
        return Some("gmail_image_proxy");
    }
    // Apple Mail Privacy Protection prefetches with a bare "Mozilla/5.0",
    // from Apple's own 17.0.0.0/8.
    let from_apple = matches!(network, Some(IpAddr::V4(v4)) if v4.octets()[0] == 17);
    if lower_agent.trim() == "mozilla/5.0" || from_apple {
        return Some("apple_mpp");
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

    #[tokio::test]
    async fn each_signal_has_its_reason() {
        let d = BotDetector::new(BotRules::default());
        let late = 3_600;
        assert_eq!(
            d.classify(&hit(EventKind::Click, BROWSER, late)).await,
            None
        );
        let head = Hit {
            is_head: true,
            ..hit(EventKind::Click, BROWSER, late)
        };
        assert_eq!(d.classify(&head).await.as_deref(), Some("head"));
        let slack = hit(EventKind::Click, "Slackbot-LinkExpanding 1.0", late);
        assert_eq!(d.classify(&slack).await.as_deref(), Some("ua:bot"));
        let curl = hit(EventKind::Click, "curl/8.5.0", late);
        assert_eq!(d.classify(&curl).await.as_deref(), Some("ua:curl"));
        let gmail = hit(
            EventKind::Open,
            "Mozilla/5.0 (via ggpht.com GoogleImageProxy)",
            late,
        );
        assert_eq!(
            d.classify(&gmail).await.as_deref(),
            Some("gmail_image_proxy")
        );
        let apple = hit(EventKind::Open, "Mozilla/5.0", late);
        assert_eq!(d.classify(&apple).await.as_deref(), Some("apple_mpp"));
        let from_apple = Hit {
            network: "17.58.0.0".parse().ok(),
            ..hit(EventKind::Open, BROWSER, late)
        };
        assert_eq!(d.classify(&from_apple).await.as_deref(), Some("apple_mpp"));
        let apple_click = Hit {
            network: "17.58.0.0".parse().ok(),
            ..hit(EventKind::Click, BROWSER, late)
        };
        assert_eq!(
            d.classify(&apple_click).await,
            None,
            "only opens are prefetched"
        );
        let fast = hit(EventKind::Click, BROWSER, 1);
        assert_eq!(d.classify(&fast).await.as_deref(), Some("too_fast"));
        let none = Hit {
            user_agent: None,
            ..hit(EventKind::Open, BROWSER, late)
        };
        assert_eq!(d.classify(&none).await.as_deref(), Some("no_user_agent"));
    }

    #[tokio::test]
    async fn different_links_of_one_letter_in_a_burst_are_bots() {
        let d = BotDetector::new(BotRules::default());
        let click = |position| Hit {
            letter: Some(("m", 7, position)),
            ..hit(EventKind::Click, BROWSER, 3_600)
        };
        assert_eq!(d.classify(&click(1)).await, None);
        assert_eq!(
            d.classify(&click(1)).await,
            None,
            "the same link twice is no burst"
        );
        assert_eq!(d.classify(&click(2)).await, None);
        assert_eq!(d.classify(&click(3)).await.as_deref(), Some("burst"));
        let other_letter = Hit {
            letter: Some(("m", 8, 4)),
            ..click(4)
        };
        assert_eq!(d.classify(&other_letter).await, None);
    }
}
