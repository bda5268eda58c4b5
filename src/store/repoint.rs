//! Repointing a sent link, for `linktrack links repoint` and `PATCH
//! /api/mailings/{id}/links/{position}` alike: which links a request names
//! (a position, a name, the URL they lead to now; every letter's or one
//! recipient's), the target checked, the repoints recorded with where each
//! link led before; and each position's name, current target and history
//! ([`list`]).

use super::error::StoreError;
use super::link_rules::{self, MailingLink, NewRepoint, Repoint};
use crate::letter::link_template::Refill;
use crate::mailing_id::MailingId;
use std::collections::{BTreeMap, HashMap};

/// Which links of a mailing a repoint names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkSelector {
    /// The position, as the stats number it (the first link is 1).
    Position(u32),
    /// The position named so by `data-linktrack-name`.
    Name(String),
    /// Every link that leads to this URL now.
    From(String),
}

impl LinkSelector {
    /// A path segment of the API: a number is a position, anything else a
    /// name (names are never only digits).
    pub fn from_segment(segment: &str) -> LinkSelector {
        match segment.parse() {
            Ok(position) => LinkSelector::Position(position),
            Err(_) => LinkSelector::Name(segment.to_owned()),
        }
    }
}

/// A repoint asked for.
#[derive(Debug, Clone)]
pub struct RepointRequest {
    pub links: LinkSelector,
    /// Only this recipient's letter (their address); `None`: every letter.
    pub recipient: Option<String>,
    pub to: String,
    /// `cli`, or the API credential's name.
    pub who: String,
}

/// Why a repoint was refused; nothing was recorded.
#[derive(Debug, thiserror::Error)]
pub enum RepointError {
    #[error("mailing {0:?} not found")]
    UnknownMailing(String),
    #[error("mailing {mailing} has no link at position {position} (its links are {known})")]
    UnknownPosition {
        mailing: String,
        position: u32,
        known: String,
    },
    #[error("mailing {mailing} has no link named {name:?} (its names: {known})")]
    UnknownName {
        mailing: String,
        name: String,
        known: String,
    },
    #[error("no link of mailing {mailing} leads to {url:?} now")]
    NoLinkWithUrl { mailing: String, url: String },
    #[error("{address:?} has no letter of mailing {mailing}")]
    UnknownRecipient { mailing: String, address: String },
    #[error("target {url:?} refused: {rule}")]
    TargetRefused { url: String, rule: &'static str },
    #[error(
        "target {url:?} refused: {reason}{}",
        template.as_ref().map(|why| format!(": {why}")).unwrap_or_default()
    )]
    FieldsRefused {
        url: String,
        reason: String,
        /// Why the link's URL cannot take the target's fields, when that
        /// is the reason.
        #[source]
        template: Option<crate::letter::link_template::TemplateError>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RepointError {
    /// The error's code in the API's JSON (`{"error": {"code", "message"}}`).
    pub fn code(&self) -> &'static str {
        match self {
            RepointError::UnknownMailing(_) => "unknown_mailing",
            RepointError::UnknownPosition { .. } => "unknown_position",
            RepointError::UnknownName { .. } => "unknown_name",
            RepointError::NoLinkWithUrl { .. } => "no_link_with_url",
            RepointError::UnknownRecipient { .. } => "unknown_recipient",
            RepointError::TargetRefused { .. } | RepointError::FieldsRefused { .. } => {
                "target_refused"
            }
            RepointError::Store(_) => "database",
        }
    }
}

/// The longest target accepted, in bytes (a URL must fit a `Location`
/// header that proxies pass on).
pub const MAX_TARGET_BYTES: usize = 8 * 1024;

/// Check a repoint's target: an absolute `http://` or `https://` URL with a
/// host, no white space or control characters, at most
/// [`MAX_TARGET_BYTES`]. Anything else (`javascript:`, `data:`, a relative
/// path) is refused naming the rule.
pub fn check_target(url: &str) -> Result<(), RepointError> {
    let refuse = |rule| {
        Err(RepointError::TargetRefused {
            url: url.to_owned(),
            rule,
        })
    };
    if url.len() > MAX_TARGET_BYTES {
        return refuse("a target is at most 8 KiB");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return refuse("a target has no white space or control characters (percent-encode them)");
    }
    if has_fields(url) {
        return refuse(
            "a target is a complete URL here; fields ({{ … }}) repoint a personalised position or name",
        );
    }
    let http = "the target must be an http:// or https:// URL (javascript:, data: and every other scheme are refused)";
    match url::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => match parsed.host_str() {
            Some(host) if !host.is_empty() => Ok(()),
            _ => refuse("the target must name a host"),
        },
        _ => refuse(http),
    }
}

/// Whether a target is a template (`{{ … }}` or `{% … %}` in it).
fn has_fields(url: &str) -> bool {
    url.contains("{{") || url.contains("{%")
}

/// One click position of a mailing as listed: its name, where it leads
/// now, and its repoints, oldest first.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ListedLink {
    pub position: u32,
    pub name: Option<String>,
    /// The mailing's UTM tags are added to this link at the redirect.
    pub utm: bool,
    /// The URL as built (a personalised link's as the creative writes it).
    pub built: String,
    /// Where the link leads every letter now.
    pub current: String,
    /// 0 until the first repoint of the position.
    pub version: u32,
    pub history: Vec<Repoint>,
}

/// Every click position of a mailing with its current target and history.
pub async fn list(
    pool: &sqlx::MySqlPool,
    mailing_id: &MailingId,
) -> Result<Vec<ListedLink>, RepointError> {
    if !link_rules::mailing_exists(pool, mailing_id).await? {
        return Err(RepointError::UnknownMailing(mailing_id.to_string()));
    }
    let links = creative_links(pool, mailing_id).await?;
    let history = link_rules::history(pool, mailing_id).await?;
    let mut by_position: BTreeMap<u32, Vec<Repoint>> = BTreeMap::new();
    for repoint in history {
        by_position
            .entry(repoint.position)
            .or_default()
            .push(repoint);
    }
    Ok(links
        .into_iter()
        .map(|link| {
            let history = by_position.remove(&link.position).unwrap_or_default();
            let newest = history.iter().rev().find(|r| r.letter_id.is_none());
            ListedLink {
                position: link.position,
                name: link.name,
                utm: link.utm,
                current: newest.map_or_else(|| link.source_url.clone(), |r| r.to.clone()),
                version: history.iter().map(|r| r.version).max().unwrap_or(0),
                built: link.source_url,
                history,
            }
        })
        .collect())
}

/// The creative's click positions: `mailing_links`, or for a mailing built
/// before it, the first letter's links (no names).
async fn creative_links(
    pool: &sqlx::MySqlPool,
    mailing_id: &MailingId,
) -> Result<Vec<MailingLink>, StoreError> {
    let links = link_rules::positions(pool, mailing_id).await?;
    if !links.is_empty() {
        return Ok(links);
    }
    let urls = super::stats::link_urls(pool, mailing_id).await?;
    Ok(urls
        .into_iter()
        .map(|(position, source_url)| MailingLink {
            position,
            name: None,
            utm: true,
            source_url,
        })
        .collect())
}

/// Record the repoint `request` asks for; returns the repoints recorded
/// (one per link it names). Refused as a whole, recording nothing, when
/// the mailing, a position, a name or the recipient is unknown or the
/// target is refused.
pub async fn repoint(
    pool: &sqlx::MySqlPool,
    mailing_id: &MailingId,
    request: &RepointRequest,
) -> Result<Vec<Repoint>, RepointError> {
    let with_fields = has_fields(&request.to);
    if !with_fields {
        check_target(&request.to)?;
    }
    if !link_rules::mailing_exists(pool, mailing_id).await? {
        return Err(RepointError::UnknownMailing(mailing_id.to_string()));
    }
    let listed = creative_links(pool, mailing_id).await?;
    let mailing = mailing_id.to_string();
    let letter = match &request.recipient {
        Some(address) => Some(letter_of(pool, mailing_id, address).await?),
        None => None,
    };
    let current = Current::of(
        &listed,
        link_rules::current_targets(pool, mailing_id).await?,
    );
    let positions = match &request.links {
        LinkSelector::Position(position) => vec![named_position(&listed, &mailing, *position)?],
        LinkSelector::Name(name) => vec![named(&listed, &mailing, name)?],
        LinkSelector::From(url) => current.leading_to(url).collect(),
    };
    if with_fields {
        let repoints = with_letter_fields(
            pool, mailing_id, request, &listed, &current, positions, letter,
        )
        .await?;
        return Ok(link_rules::record(pool, mailing_id, &request.who, &repoints).await?);
    }
    let mut repoints = Vec::new();
    match letter {
        Some(letter) => {
            let stored = link_rules::letter_urls(pool, mailing_id, letter).await?;
            let letter_now = |position: u32| {
                current
                    .of_letter(position, letter)
                    .or_else(|| current.position_repointed(position))
                    .or_else(|| stored.get(&position).cloned())
            };
            let positions: Vec<u32> = match &request.links {
                LinkSelector::From(url) => stored
                    .keys()
                    .copied()
                    .filter(|&p| letter_now(p).as_deref() == Some(url.as_str()))
                    .collect(),
                _ => positions,
            };
            for position in positions {
                repoints.push(NewRepoint {
                    position,
                    letter_id: letter,
                    from: letter_now(position).unwrap_or_default(),
                    to: request.to.clone(),
                });
            }
        }
        None => {
            for position in positions {
                repoints.push(NewRepoint {
                    position,
                    letter_id: 0,
                    from: current.of_position(position),
                    to: request.to.clone(),
                });
            }
            if let LinkSelector::From(url) = &request.links {
                repoints.extend(
                    personal_links_leading_to(pool, mailing_id, &current, url, &request.to).await?,
                );
            }
        }
    }
    if repoints.is_empty() {
        if let LinkSelector::From(url) = &request.links {
            return Err(RepointError::NoLinkWithUrl {
                mailing,
                url: url.clone(),
            });
        }
    }
    Ok(link_rules::record(pool, mailing_id, &request.who, &repoints).await?)
}

/// The repoints of a target with fields
/// (`https://shop.example/account/{{ id }}`): each letter's link leads to
/// it filled with the values that letter's link was built with. One
/// repoint per position for every letter (the servers fill it in at the
/// redirect, from the link's stored URL), or the one letter's, filled in
/// now. Refused when a field is not one of the position's built URL.
async fn with_letter_fields(
    pool: &sqlx::MySqlPool,
    mailing_id: &MailingId,
    request: &RepointRequest,
    listed: &[MailingLink],
    current: &Current,
    positions: Vec<u32>,
    letter: Option<u64>,
) -> Result<Vec<NewRepoint>, RepointError> {
    let refused = |reason: String| RepointError::FieldsRefused {
        url: request.to.clone(),
        reason,
        template: None,
    };
    if matches!(request.links, LinkSelector::From(_)) {
        return Err(refused(
            "a target with fields repoints a position or a name (--position, --name), not --from"
                .to_owned(),
        ));
    }
    let naming_the_target = |error: RepointError| match error {
        RepointError::TargetRefused { rule, .. } => RepointError::TargetRefused {
            url: request.to.clone(),
            rule,
        },
        other => other,
    };
    let stored = match letter {
        Some(letter) => link_rules::letter_urls(pool, mailing_id, letter).await?,
        None => Default::default(),
    };
    let mut repoints = Vec::new();
    for position in positions {
        let built = listed
            .iter()
            .find(|link| link.position == position)
            .map_or("", |link| link.source_url.as_str());
        let refill =
            Refill::new(built, &request.to).map_err(|template| RepointError::FieldsRefused {
                url: request.to.clone(),
                reason: format!("position {position}"),
                template: Some(template),
            })?;
        check_target(&refill.sample_target()).map_err(naming_the_target)?;
        let Some(letter) = letter else {
            repoints.push(NewRepoint {
                position,
                letter_id: 0,
                from: current.of_position(position),
                to: request.to.clone(),
            });
            continue;
        };
        let Some(built_url) = stored.get(&position) else {
            continue;
        };
        let to = refill.apply(built_url).ok_or_else(|| {
            refused(format!(
                "this letter's link at position {position} ({built_url}) is not a URL {built} makes"
            ))
        })?;
        check_target(&to)?;
        let from = current
            .of_letter(position, letter)
            .or_else(|| current.position_repointed(position))
            .unwrap_or_else(|| built_url.clone());
        repoints.push(NewRepoint {
            position,
            letter_id: letter,
            from,
            to,
        });
    }
    Ok(repoints)
}

/// The letters of personalised positions (their URL differs per letter)
/// whose own link leads to `url` now: one repoint each.
async fn personal_links_leading_to(
    pool: &sqlx::MySqlPool,
    mailing_id: &MailingId,
    current: &Current,
    url: &str,
    to: &str,
) -> Result<Vec<NewRepoint>, StoreError> {
    let found = link_rules::letters_with_url(pool, mailing_id, url).await?;
    Ok(found
        .into_iter()
        .filter(|&(position, letter)| {
            current.is_personal(position)
                && current.of_letter(position, letter).is_none()
                && current.position_repointed(position).is_none()
        })
        .map(|(position, letter_id)| NewRepoint {
            position,
            letter_id,
            from: url.to_owned(),
            to: to.to_owned(),
        })
        .collect())
}

/// The letter of `address` in the mailing.
async fn letter_of(
    pool: &sqlx::MySqlPool,
    mailing_id: &MailingId,
    address: &str,
) -> Result<u64, RepointError> {
    let normalised = crate::address::normalize(address);
    let unknown = || RepointError::UnknownRecipient {
        mailing: mailing_id.to_string(),
        address: address.to_owned(),
    };
    if normalised.is_empty() {
        return Err(unknown());
    }
    link_rules::letter_of(pool, mailing_id, &normalised)
        .await?
        .ok_or_else(unknown)
}

fn named_position(
    listed: &[MailingLink],
    mailing: &str,
    position: u32,
) -> Result<u32, RepointError> {
    if listed.iter().any(|link| link.position == position) {
        return Ok(position);
    }
    Err(RepointError::UnknownPosition {
        mailing: mailing.to_owned(),
        position,
        known: known_positions(listed),
    })
}

fn named(listed: &[MailingLink], mailing: &str, name: &str) -> Result<u32, RepointError> {
    if let Some(link) = listed
        .iter()
        .find(|link| link.name.as_deref() == Some(name))
    {
        return Ok(link.position);
    }
    let names: Vec<String> = listed
        .iter()
        .filter_map(|link| link.name.as_deref().map(|n| format!("{n:?}")))
        .collect();
    Err(RepointError::UnknownName {
        mailing: mailing.to_owned(),
        name: name.to_owned(),
        known: if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        },
    })
}

/// The positions a mailing has, said briefly: `1–8`, or `none`.
fn known_positions(listed: &[MailingLink]) -> String {
    match (listed.first(), listed.last()) {
        (Some(first), Some(last)) if first.position == last.position => first.position.to_string(),
        (Some(first), Some(last)) => format!("{}–{}", first.position, last.position),
        _ => "none".to_owned(),
    }
}

/// Where a mailing's links lead now, by position and by letter.
struct Current {
    /// The newest position-wide target, or the built URL.
    positions: BTreeMap<u32, (String, bool)>,
    letters: HashMap<(u32, u64), String>,
}

impl Current {
    /// From the creative's links and the current targets of the repointed
    /// ones ([`link_rules::current_targets`]).
    /// A letter's own repoint gives way to a newer one of its position.
    fn of(links: &[MailingLink], targets: HashMap<(u32, u64), (u64, String)>) -> Current {
        let mut positions: BTreeMap<u32, (String, bool)> = links
            .iter()
            .map(|link| (link.position, (link.source_url.clone(), false)))
            .collect();
        let position_ids: HashMap<u32, u64> = targets
            .iter()
            .filter(|((_, letter), _)| *letter == 0)
            .map(|((position, _), (id, _))| (*position, *id))
            .collect();
        let mut letters = HashMap::new();
        for ((position, letter), (id, to)) in targets {
            if letter == 0 {
                positions.insert(position, (to, true));
            } else if position_ids.get(&position).is_none_or(|&newer| newer < id) {
                letters.insert((position, letter), to);
            }
        }
        Current { positions, letters }
    }

    /// Where `position` leads every letter now.
    fn of_position(&self, position: u32) -> String {
        self.positions
            .get(&position)
            .map(|(url, _)| url.clone())
            .unwrap_or_default()
    }

    /// The position's position-wide repointed target, if it was repointed.
    fn position_repointed(&self, position: u32) -> Option<String> {
        self.positions
            .get(&position)
            .filter(|(_, repointed)| *repointed)
            .map(|(url, _)| url.clone())
    }

    fn of_letter(&self, position: u32, letter: u64) -> Option<String> {
        self.letters.get(&(position, letter)).cloned()
    }

    /// Whether the position's URL is made per letter (`{{ }}` in it).
    fn is_personal(&self, position: u32) -> bool {
        self.positions
            .get(&position)
            .is_some_and(|(url, _)| url.contains("{{") || url.contains("{%"))
    }

    /// The positions that lead every letter to `url` now.
    fn leading_to<'a>(&'a self, url: &'a str) -> impl Iterator<Item = u32> + 'a {
        self.positions
            .iter()
            .filter(move |(_, (now, _))| now == url)
            .map(|(position, _)| *position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_must_be_http_or_https_urls() {
        for good in ["https://shop.example/fixed?a=1#x", "http://a.test"] {
            assert!(check_target(good).is_ok(), "{good}");
        }
        for (bad, rule) in [
            ("javascript:alert(1)", "http:// or https://"),
            ("data:text/html,<b>x</b>", "http:// or https://"),
            ("JavaScript:alert(1)", "http:// or https://"),
            ("ftp://a.test/x", "http:// or https://"),
            ("/relative", "http:// or https://"),
            ("https://a.test/x y", "white space"),
            ("https://a.test/?u={{id}}", "fields"),
        ] {
            let err = check_target(bad).unwrap_err();
            assert_eq!(err.code(), "target_refused");
            assert!(err.to_string().contains(rule), "{bad}: {err}");
        }
    }

    #[test]
    fn a_segment_of_digits_is_a_position_else_a_name() {
        assert_eq!(LinkSelector::from_segment("3"), LinkSelector::Position(3));
        assert_eq!(
            LinkSelector::from_segment("cta"),
            LinkSelector::Name("cta".into())
        );
    }
}
