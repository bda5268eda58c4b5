//! The dashboard: `GET /mailings` (index) and `GET /mailings/{id}`,
//! server-rendered with minijinja (templates embedded at compile time,
//! HTML auto-escaped): inline SVG charts (cumulative over the first 48
//! hours, and per minute or hour), bars for the breakdowns, links named by
//! their text, and the click map with its images inlined. No front-end
//! build; one hashed script shows times in the viewer's time zone.

use super::error::{named_mailing, StatsError};
use super::state::StatsState;
use super::{chart, clickmap, creative_images};
use crate::letter;
use crate::letter::PreviewLimits;
use crate::store::stats::{self, LinkStats};
use axum::extract::{Path, State};
use axum::http::{header, HeaderName};
use axum::response::Html;
use minijinja::context;
use minijinja::value::Serde;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The dashboard's style sheet. The templates insert it with `|safe`:
/// autoescaping would turn its quotes and slashes into entities inside
/// `<style>` (which holds raw text), and the browser would drop the rules.
/// It is our own compiled-in file, never input.
const CSS: &str = include_str!("templates/base.css");

/// A dashboard page with the headers every one carries.
type Page = ([(HeaderName, &'static str); 4], Html<String>);

/// No caching of figures behind a login; no framing of the dashboard; and no
/// Referer to the image hosts the click map's creative loads from.
fn page(html: String) -> Page {
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        Html(html),
    )
}

/// How many mailings the index lists.
const INDEX_LIMIT: u32 = 500;

/// `GET /mailings`.
pub(crate) async fn index(State(state): State<StatsState>) -> Result<Page, StatsError> {
    let mailings = stats::list_mailings(&state.pool, INDEX_LIMIT).await?;
    let html = state.templates.get_template("index.html")?.render(
        context! { css => CSS, csp => super::headers::page_policy(), mailings => Serde(mailings) },
    )?;
    Ok(page(html))
}

/// A link row with its share of human clicks, as the template shows it.
#[derive(serde::Serialize)]
struct LinkRow<'a> {
    #[serde(flatten)]
    link: &'a LinkStats,
    share: String,
    /// The link's text in the creative (or its image's alt, or title).
    name: Option<&'a str>,
}

/// Breakdown values shown per dimension and side.
const BARS_SHOWN: usize = 8;

/// The breakdowns' titles, in the order the page shows them.
const BREAKDOWN_TITLES: [(&str, &str); 6] = [
    ("client", "Mail client"),
    ("client_type", "Client type"),
    ("os", "Operating system"),
    ("device", "Device"),
    ("provider", "Mailbox provider"),
    ("country", "Country"),
];

/// One bar: a value, its humans' events, the bots' beside, and its length
/// as a share of the side's largest value.
#[derive(serde::Serialize)]
struct Bar {
    value: String,
    n: u64,
    bots: u64,
    width: String,
}

#[derive(serde::Serialize)]
struct BarSide {
    name: &'static str,
    rows: Vec<Bar>,
}

#[derive(serde::Serialize)]
struct BarChart {
    dimension: &'static str,
    title: &'static str,
    sides: [BarSide; 2],
}

/// The bars of one side (opens or clicks) of one dimension.
fn bars(shares: Option<&Vec<crate::store::breakdowns::Share>>) -> Vec<Bar> {
    let shares = shares.map(Vec::as_slice).unwrap_or_default();
    let max = shares.iter().map(|s| s.n).max().unwrap_or(0).max(1);
    shares
        .iter()
        .filter(|s| s.n > 0 || s.bots > 0)
        .take(BARS_SHOWN)
        .map(|s| Bar {
            value: s.value.clone(),
            n: s.n,
            bots: s.bots,
            width: format!("{:.1}", s.n as f64 * 100.0 / max as f64),
        })
        .collect()
}

fn bar_charts(breakdowns: &crate::store::breakdowns::Breakdowns) -> Vec<BarChart> {
    BREAKDOWN_TITLES
        .iter()
        .map(|(dimension, title)| BarChart {
            dimension,
            title,
            sides: [
                BarSide {
                    name: "Opens",
                    rows: bars(breakdowns.opens.get(*dimension)),
                },
                BarSide {
                    name: "Clicks",
                    rows: bars(breakdowns.clicks.get(*dimension)),
                },
            ],
        })
        .collect()
}

/// `GET /mailings/{id}`.
pub(crate) async fn mailing(
    State(state): State<StatsState>,
    Path(id): Path<String>,
) -> Result<Page, StatsError> {
    let id = named_mailing(id)?;
    let summary = stats::summary(&state.pool, &id)
        .await?
        .ok_or_else(|| StatsError::UnknownMailing(id.to_string()))?;
    let clicks: BTreeMap<u32, u64> = summary
        .links
        .iter()
        .map(|l| (l.position, l.human.total))
        .collect();
    let total: u64 = clicks.values().sum();
    let saved = stats::mailing_html(&state.pool, &id).await?;
    let names = match &saved {
        Some(html) => clickmap::link_names(html).unwrap_or_else(|err| {
            tracing::warn!(%err, "links shown without their names");
            BTreeMap::new()
        }),
        None => BTreeMap::new(),
    };
    let links: Vec<LinkRow> = summary
        .links
        .iter()
        .map(|link| LinkRow {
            link,
            share: share(link.human.total, total),
            name: names.get(&link.position).map(String::as_str),
        })
        .collect();
    let breakdowns = crate::store::breakdowns::read(&state.pool, Some(id.as_str())).await?;
    let (clickmap, preview_limited) = match saved {
        // The saved creative is the template: preview it as the builder would
        // personalise it, so no `{{ … }}` shows and positions still match;
        // within limits, off the request runtime (`bounded_preview`).
        Some(html) => {
            let (preview, limited) = bounded_preview(html).await;
            let map = clickmap::render(&preview, &clicks)?;
            let map = creative_images::inline(&map, state.images.as_deref()).await;
            (Some(map), limited)
        }
        None => (None, None),
    };
    let live = match &state.live {
        Some(live) => live
            .snapshot(id.as_str())
            .await
            .inspect_err(|err| tracing::warn!(%err, "dashboard without live stats"))
            .ok(),
        None => None,
    };
    let html = state
        .templates
        .get_template("mailing.html")?
        .render(context! {
            css => CSS,
            csp => super::headers::page_policy(),
            s => Serde(&summary),
            classes => Serde(summary.classes()),
            bot_click_percent => format!("{:.0}", summary.classes().bot_share * 100.0),
            bounces => Serde(bounce_cards(&summary.bounces)),
            links => Serde(links),
            chart => chart_for(&summary),
            cumulative => chart::cumulative_svg(&summary.hours, &summary.minutes),
            first_event => chart::first_bucket(&summary.hours, &summary.minutes)
                .map(|at| at.and_utc().format("%Y-%m-%dT%H:%M:%SZ").to_string()),
            breakdowns => Serde(bar_charts(&breakdowns)),
            names => Serde(&names),
            chart_per => match chart::resolution(&summary.hours, &summary.minutes) {
                chart::Resolution::Minute => "minute",
                chart::Resolution::Hour => "hour",
            },
            clickmap,
            preview_limited,
            live_up => state.live.as_ref().map(|l| l.is_up()),
            live => Serde(live),
        })?;
    Ok(page(html))
}

/// The longest a click map's preview may take, queue included.
const PREVIEW_TIMEOUT: Duration = Duration::from_secs(1);

/// One preview renders at a time: ten dashboard requests for a hostile
/// creative take one blocking thread, not both cores.
static PREVIEWS: Semaphore = Semaphore::const_new(1);

/// The creative as the builder would personalise it, rendered on the
/// blocking pool within [`PreviewLimits`] and [`PREVIEW_TIMEOUT`]; past a
/// limit, its text with the tags removed and why (shown on the page).
async fn bounded_preview(html: String) -> (String, Option<String>) {
    let render = async {
        let _permit = PREVIEWS.acquire().await.ok()?;
        let source = html.clone();
        tokio::task::spawn_blocking(move || {
            letter::preview_bounded(&source, true, PreviewLimits::default())
        })
        .await
        .ok()
    };
    match tokio::time::timeout(PREVIEW_TIMEOUT, render).await {
        Ok(Some(Ok(preview))) => (preview, None),
        Ok(Some(Err(limited))) => (letter::preview_text(&html), Some(limited.to_string())),
        Ok(None) | Err(_) => (
            letter::preview_text(&html),
            Some(format!(
                "the template's preview did not finish within {PREVIEW_TIMEOUT:?}"
            )),
        ),
    }
}

/// Minutes in the first hours after a send, hours after.
fn chart_for(summary: &stats::MailingSummary) -> String {
    match chart::resolution(&summary.hours, &summary.minutes) {
        chart::Resolution::Minute => chart::svg(&summary.minutes, chart::Resolution::Minute),
        chart::Resolution::Hour => chart::svg(&summary.hours, chart::Resolution::Hour),
    }
}

/// The bounce and complaint cards' percentages (of `base`: delivered
/// letters, or letters built when none went out over SMTP), the base
/// with its count ("of 1,000 letters delivered").
#[derive(serde::Serialize)]
struct BounceCards {
    hard: String,
    soft: String,
    complaints: String,
    base: String,
}

fn bounce_cards(bounces: &crate::store::bounces::BounceSummary) -> BounceCards {
    let percent = |count| format!("{:.2} %", bounces.rate(count) * 100.0);
    BounceCards {
        hard: percent(bounces.hard),
        soft: percent(bounces.soft),
        complaints: percent(bounces.complaints),
        base: match bounces.base() {
            ("delivered", n) => format!("of {} delivered", letters(n)),
            (_, n) => format!("of {} built", letters(n)),
        },
    }
}

/// "1 letter", "1,250 letters".
fn letters(n: u64) -> String {
    let digits = n.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    match n {
        1 => "1 letter".to_owned(),
        _ => format!("{grouped} letters"),
    }
}

fn share(part: u64, total: u64) -> String {
    if total == 0 {
        return "–".to_owned();
    }
    format!("{:.1}%", part as f64 * 100.0 / total as f64)
}
