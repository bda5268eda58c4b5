//! What a user agent says about the reader's side: mail client, client
//! type, operating system and device (the breakdowns). Never on
//! the request path: the rollup classifies each distinct user agent once
//! and keeps the answer (`user_agent_classes`), so a hit costs nothing
//! more.
//!
//! Mail clients and proxies that browsers' parsers do not know are
//! recognised first, by markers in the user agent: Gmail's image proxy,
//! Apple Mail Privacy Protection's prefetch (a bare `Mozilla/5.0`, as
//! [`super::BotDetector`] judges it), Outlook on the desktop, the Gmail and
//! Outlook apps, Yahoo Mail, Thunderbird and other desktop clients.
//! Everything else (webmail read in a browser, links opened in one) is
//! parsed by woothee, Project Woothee's maintained parser, for browser,
//! OS and device.

use woothee::parser::Parser;

/// What kind of reader's software made the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientType {
    /// A browser: webmail, or a link opened from any client.
    Webmail,
    /// A desktop mail program.
    Desktop,
    /// A mail app on a phone or tablet.
    Mobile,
    /// A provider's image proxy or prefetcher: it loads the images, not
    /// necessarily because someone looked.
    Proxy,
    Unknown,
}

impl ClientType {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientType::Webmail => "webmail",
            ClientType::Desktop => "desktop",
            ClientType::Mobile => "mobile",
            ClientType::Proxy => "proxy",
            ClientType::Unknown => "unknown",
        }
    }
}

/// The reader's device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    Desktop,
    Mobile,
    Tablet,
    Unknown,
}

impl Device {
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Desktop => "desktop",
            Device::Mobile => "mobile",
            Device::Tablet => "tablet",
            Device::Unknown => "unknown",
        }
    }
}

/// One user agent, classified. Texts are at most 64 characters (the
/// column's width).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientClass {
    /// "Gmail image proxy", "Outlook", "Chrome", … or "unknown".
    pub client: String,
    pub client_type: ClientType,
    /// "Windows", "macOS", "iOS", "Android", "Linux", … or "unknown".
    pub os: String,
    pub device: Device,
}

/// A mail client or proxy recognised by a marker in its user agent
/// (compared without regard to case), tried in this order.
struct Known {
    markers: &'static [&'static str],
    client: &'static str,
    client_type: ClientType,
    /// The OS when the client implies one.
    os: Option<&'static str>,
}

const KNOWN: &[Known] = &[
    Known {
        markers: &["googleimageproxy"],
        client: "Gmail image proxy",
        client_type: ClientType::Proxy,
        os: None,
    },
    Known {
        markers: &["yahoomailproxy"],
        client: "Yahoo image proxy",
        client_type: ClientType::Proxy,
        os: None,
    },
    Known {
        markers: &["microsoft outlook", "ms-office", "msoffice"],
        client: "Outlook",
        client_type: ClientType::Desktop,
        os: Some("Windows"),
    },
    Known {
        markers: &["thunderbird"],
        client: "Thunderbird",
        client_type: ClientType::Desktop,
        os: None,
    },
    Known {
        markers: &["gmailapp", "com.google.gmail"],
        client: "Gmail app",
        client_type: ClientType::Mobile,
        os: None,
    },
    Known {
        markers: &["outlook-ios", "outlook-android", "outlookmobile"],
        client: "Outlook app",
        client_type: ClientType::Mobile,
        os: None,
    },
    Known {
        markers: &["yahoomobile", "ymobile"],
        client: "Yahoo Mail app",
        client_type: ClientType::Mobile,
        os: None,
    },
    Known {
        markers: &[
            "airmail",
            "spark/",
            "em client",
            "postbox",
            "evolution/",
            "kmail",
        ],
        client: "other desktop client",
        client_type: ClientType::Desktop,
        os: None,
    },
];

/// Apple Mail Privacy Protection prefetches with this user agent and
/// nothing else (see [`super::BotDetector`]).
const APPLE_MPP_AGENT: &str = "mozilla/5.0";

/// The longest text kept per field.
const FIELD_CHARS: usize = 64;

/// Classifies user agents (woothee's parser, built once).
pub struct Classifier {
    parser: Parser,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier {
            parser: Parser::new(),
        }
    }
}

impl Classifier {
    /// Classify one user agent (`None`: the request had none).
    pub fn classify(&self, user_agent: Option<&str>) -> ClientClass {
        let agent = user_agent.map(str::trim).unwrap_or_default();
        let lower = agent.to_ascii_lowercase();
        if agent.is_empty() {
            return unknown();
        }
        if lower == APPLE_MPP_AGENT {
            return ClientClass {
                client: "Apple Mail Privacy Protection".into(),
                client_type: ClientType::Proxy,
                os: "unknown".into(),
                device: Device::Unknown,
            };
        }
        let parsed = self.parser.parse(agent);
        let (os, device) = match &parsed {
            Some(result) => (
                os_family(result.os, &lower),
                device_of(result.category, &lower),
            ),
            None => (os_family("", &lower), device_of("", &lower)),
        };
        if let Some(known) = KNOWN
            .iter()
            .find(|k| k.markers.iter().any(|m| lower.contains(m)))
        {
            // A proxy's own words say nothing of the reader's system.
            let (os, device) = match known.client_type {
                ClientType::Proxy => ("unknown".to_owned(), Device::Unknown),
                ClientType::Desktop => (known.os.map_or(os, str::to_owned), Device::Desktop),
                _ => (known.os.map_or(os, str::to_owned), device),
            };
            return ClientClass {
                client: known.client.into(),
                client_type: known.client_type,
                os,
                device,
            };
        }
        match parsed {
            // A browser; libraries and crawlers ("misc", "crawler") are no reader's.
            Some(result)
                if result.name != "UNKNOWN"
                    && matches!(result.category, "pc" | "smartphone" | "mobilephone") =>
            {
                ClientClass {
                    client: clip(result.name),
                    client_type: ClientType::Webmail,
                    os,
                    device,
                }
            }
            _ => ClientClass {
                os,
                device,
                ..unknown()
            },
        }
    }
}

fn unknown() -> ClientClass {
    ClientClass {
        client: "unknown".into(),
        client_type: ClientType::Unknown,
        os: "unknown".into(),
        device: Device::Unknown,
    }
}

/// woothee's OS names by family ("Windows 10" and "Windows 7" are both
/// Windows; iPhone and iPad are iOS).
fn os_family(os: &str, lower: &str) -> String {
    let family = match os {
        o if o.starts_with("Windows") => "Windows",
        "Mac OSX" | "Mac OS Classic" => "macOS",
        "iPhone" | "iPad" | "iPod" | "iOS" => "iOS",
        "Android" => "Android",
        "Linux" => "Linux",
        "ChromeOS" => "ChromeOS",
        _ if lower.contains("iphone") || lower.contains("ipad") => "iOS",
        _ if lower.contains("android") => "Android",
        _ if lower.contains("windows") => "Windows",
        _ if lower.contains("mac os x") || lower.contains("macintosh") => "macOS",
        _ if lower.contains("linux") => "Linux",
        _ => "unknown",
    };
    family.into()
}

/// The device from woothee's category and the user agent's own words.
fn device_of(category: &str, lower: &str) -> Device {
    if lower.contains("ipad") || (lower.contains("android") && !lower.contains("mobile")) {
        return Device::Tablet;
    }
    match category {
        "pc" => Device::Desktop,
        "smartphone" | "mobilephone" => Device::Mobile,
        _ if lower.contains("iphone") || lower.contains("mobile") => Device::Mobile,
        _ if lower.contains("windows") || lower.contains("macintosh") => Device::Desktop,
        _ => Device::Unknown,
    }
}

fn clip(text: &str) -> String {
    text.chars().take(FIELD_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real-shaped user agents and what they are.
    pub(crate) const SAMPLES: &[(&str, &str, &str, &str, &str)] = &[
        (
            "Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)",
            "Gmail image proxy",
            "proxy",
            "unknown",
            "unknown",
        ),
        ("Mozilla/5.0", "Apple Mail Privacy Protection", "proxy", "unknown", "unknown"),
        (
            "Microsoft Office/16.0 (Windows NT 10.0; Microsoft Outlook 16.0.17231; Pro)",
            "Outlook",
            "desktop",
            "Windows",
            "desktop",
        ),
        (
            "Mozilla/4.0 (compatible; ms-office; MSOffice 16)",
            "Outlook",
            "desktop",
            "Windows",
            "desktop",
        ),
        (
            "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Thunderbird/128.3.0",
            "Thunderbird",
            "desktop",
            "Linux",
            "desktop",
        ),
        (
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 GmailApp/6.0.240310",
            "Gmail app",
            "mobile",
            "iOS",
            "mobile",
        ),
        (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
            "Chrome",
            "webmail",
            "Windows",
            "desktop",
        ),
        (
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
            "Safari",
            "webmail",
            "macOS",
            "desktop",
        ),
        (
            "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
            "Chrome",
            "webmail",
            "Android",
            "mobile",
        ),
        (
            "Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
            "Safari",
            "webmail",
            "iOS",
            "tablet",
        ),
    ];

    #[test]
    fn mail_clients_proxies_and_browsers_are_told_apart() {
        let classifier = Classifier::default();
        for (agent, client, client_type, os, device) in SAMPLES {
            let class = classifier.classify(Some(agent));
            assert_eq!(
                (
                    class.client.as_str(),
                    class.client_type.as_str(),
                    class.os.as_str(),
                    class.device.as_str()
                ),
                (*client, *client_type, *os, *device),
                "{agent}"
            );
        }
        assert_eq!(classifier.classify(None), unknown());
        assert_eq!(
            classifier.classify(Some("curl/8.5.0")).client_type,
            ClientType::Unknown
        );
    }
}
