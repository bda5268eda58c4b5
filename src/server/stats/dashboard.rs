//! The dashboard: `GET /mailings` (index) and `GET /mailings/{id}`,
//! server-rendered with minijinja (templates embedded at compile time,
//! HTML auto-escaped), an inline SVG chart and the click map. No script and
//! no front-end build.

use super::{chart, clickmap, StatsError, StatsState};
use crate::letter;
use crate::letter::PreviewLimits;
use crate::store::stats::{self, LinkStats};
use axum::extract::{Path, State};
use axum::http::{header, HeaderName};
use axum::response::Html;
use minijinja::value::Serde;
use minijinja::{context, Environment};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The dashboard's style sheet. The templates insert it with `|safe`:
/// autoescaping would turn its quotes and slashes into entities inside
/// `<style>` (which holds raw text), and the browser would drop the rules.
/// It is our own compiled-in file, never input.
const CSS: &str = include_str!("templates/base.css");

/// The dashboard's templates.
pub(crate) fn templates() -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    // Subjects are templates: shown with placeholders, never as `{{ … }}`,
    // and never run (the index lists 500 of them per request).
    env.add_filter("preview", |subject: String| letter::preview_text(&subject));
    env.add_template("index.html", include_str!("templates/index.html"))?;
    env.add_template("mailing.html", include_str!("templates/mailing.html"))?;
    Ok(env)
}

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
}

/// `GET /mailings/{id}`.
pub(crate) async fn mailing(
    State(state): State<StatsState>,
    Path(id): Path<String>,
) -> Result<Page, StatsError> {
    let summary = stats::summary(&state.pool, &id)
        .await?
        .ok_or_else(|| StatsError::UnknownMailing(id.clone()))?;
    let clicks: BTreeMap<u32, u64> = summary
        .links
        .iter()
        .map(|l| (l.position, l.human.total))
        .collect();
    let total: u64 = clicks.values().sum();
    let links: Vec<LinkRow> = summary
        .links
        .iter()
        .map(|link| LinkRow {
            link,
            share: share(link.human.total, total),
        })
        .collect();
    let (clickmap, preview_limited) = match stats::mailing_html(&state.pool, &id).await? {
        // The saved creative is the template: preview it as the builder would
        // personalise it, so no `{{ … }}` shows and positions still match;
        // within limits, off the request runtime (`bounded_preview`).
        Some(html) => {
            let (preview, limited) = bounded_preview(html).await;
            (Some(clickmap::render(&preview, &clicks)?), limited)
        }
        None => (None, None),
    };
    let live = match &state.live {
        Some(live) => live
            .snapshot(&id)
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
/// letters, or letters built when none went out over SMTP).
#[derive(serde::Serialize)]
struct BounceCards {
    hard: String,
    soft: String,
    complaints: String,
    base: &'static str,
}

fn bounce_cards(bounces: &crate::store::bounces::BounceSummary) -> BounceCards {
    let percent = |count| format!("{:.2} %", bounces.rate(count) * 100.0);
    BounceCards {
        hard: percent(bounces.hard),
        soft: percent(bounces.soft),
        complaints: percent(bounces.complaints),
        base: match bounces.base().0 {
            "delivered" => "of letters delivered",
            _ => "of letters built",
        },
    }
}

fn share(part: u64, total: u64) -> String {
    if total == 0 {
        return "–".to_owned();
    }
    format!("{:.1}%", part as f64 * 100.0 / total as f64)
}
