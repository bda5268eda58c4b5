//! The mailing made ready before any letter: loaded and checked with the
//! seal key the database accepts, its tracked links' base URL found (the
//! sender's tracking domain), and the mailing, its creative and its link
//! templates stored.

use super::error::BuildError;
use super::mailing::Mailing;
use super::mailing_context::{check_bounce_domain, MailingContext, PrepareError};
use super::options::BuildOptions;
use super::row_writer::ensure_partitions;
use crate::store::{link_rules, link_templates, seal_keys, stats, tracking_domains};
use sqlx::MySqlPool;
use std::sync::Arc;

/// Load and check the mailing, and the seal key it is built with: a key
/// the database does not know, or not its current one, is refused here,
/// before anything is written (`store::seal_keys`).
pub(super) async fn load_mailing(
    pool: &MySqlPool,
    options: &BuildOptions,
) -> Result<MailingContext, BuildError> {
    let mailing = Mailing::load(&options.mailing)?;
    let secrets = seal_keys::RingSecrets {
        current: options.secret.clone(),
        previous: Vec::new(),
        new_secret: options.new_secret,
    };
    let ring = seal_keys::open_ring(pool, &secrets, seal_keys::Purpose::Build).await?;
    let seal = ring.ring.current().clone();
    let creative = mailing.html_source.clone();
    let base_url = tracking_base(pool, &options.base_url, &mailing.from).await?;
    let mut ctx = MailingContext::prepare(mailing, &base_url, options.max_letter_bytes, seal)
        .map_err(|source| match source {
            PrepareError::TooBig { size, limit } => BuildError::TooBig {
                path: creative.clone(),
                size,
                limit,
                reason: "raise the limit with --max-letter-bytes",
            },
            source => BuildError::Template {
                path: options.mailing.clone(),
                source,
            },
        })?;
    if options.letter_by_letter {
        ctx = ctx.without_plans();
    }
    if let Some(domain) = &options.bounce_domain {
        check_bounce_domain(domain).map_err(BuildError::BounceDomain)?;
    }
    ctx.set_bounce_domain(options.bounce_domain.clone());
    Ok(ctx)
}

/// Make sure today's partitions exist (every mode stores at least the
/// unsubscribe rows) and save the creative (the dashboard's click map),
/// the mailing's tracking mode and its link templates.
pub(super) async fn store_mailing(
    pool: &MySqlPool,
    options: &BuildOptions,
    mut ctx: MailingContext,
) -> Result<Arc<MailingContext>, BuildError> {
    let creative = ctx.mailing.html_source.clone();
    // Every mode stores rows (at least the unsubscribe link), so the
    // creative must fit one statement and today's partitions must exist.
    let room = stats::largest_creative(pool).await?;
    if ctx.mailing.html.len() > room {
        return Err(BuildError::TooBig {
            path: creative,
            size: ctx.mailing.html.len(),
            limit: room,
            reason: "the database cannot store a larger creative in one statement \
                     (max_allowed_packet, or the mailings.html column's 16 MB)",
        });
    }
    ensure_partitions(pool).await?;
    let mailing = &ctx.mailing;
    if let Some(existing) = stats::colliding_mailing(pool, &mailing.mailing_id).await? {
        return Err(BuildError::MailingIdCollides {
            path: options.mailing.clone(),
            id: mailing.mailing_id.to_string(),
            existing,
        });
    }
    refuse_changed_mailing(pool, options, &ctx).await?;
    stats::save_mailing(pool, &mailing.mailing_id, &mailing.subject, &mailing.html).await?;
    stats::save_track_mode(pool, &mailing.mailing_id, mailing.track.as_str()).await?;
    let sender = from_domain(&mailing.from);
    stats::save_sender_domain(pool, &mailing.mailing_id, sender.as_deref()).await?;
    let list_manage = mailing.list_manage_url.as_deref();
    stats::save_list_manage_url(pool, &mailing.mailing_id, list_manage).await?;
    // Stored before any letter: a resumed build gets the same ids back.
    let keys = ctx.template_keys();
    let today = chrono::Utc::now().date_naive();
    let ids = link_templates::intern(pool, &ctx.mailing.mailing_id, &keys, today).await?;
    ctx.set_templates(ids);
    // Names and UTM choices before the UTM tags: a server that sees the
    // tags reads the positions they apply to.
    let positions = ctx.mailing_links().map_err(|source| BuildError::Template {
        path: options.mailing.clone(),
        source,
    })?;
    link_rules::save_positions(pool, &ctx.mailing.mailing_id, &positions).await?;
    link_rules::save_utm(pool, &ctx.mailing.mailing_id, ctx.mailing.utm.as_ref()).await?;
    Ok(Arc::new(ctx))
}

/// A build under a `mailing_id` whose letters were built with another
/// subject, or with another URL at a tracked link's position, is refused
/// once, before any letter: the letters out already keep their links, so
/// the changed mailing needs an id of its own (each resumed letter would
/// otherwise be rejected one by one). Other changes to the creative (its
/// text, its pictures) resume as before.
async fn refuse_changed_mailing(
    pool: &MySqlPool,
    options: &BuildOptions,
    ctx: &MailingContext,
) -> Result<(), BuildError> {
    let mailing = &ctx.mailing;
    let Some(subject) = stats::built_subject(pool, &mailing.mailing_id).await? else {
        return Ok(());
    };
    let refuse = |changed: String| BuildError::ChangedMailing {
        path: options.mailing.clone(),
        id: mailing.mailing_id.to_string(),
        changed,
    };
    if subject != mailing.subject {
        return Err(refuse(format!(
            "the subject is now {:?}, was {subject:?}",
            mailing.subject
        )));
    }
    let stored = link_templates::of_mailing(pool, &mailing.mailing_id).await?;
    match changed_link(&stored, &ctx.template_keys()) {
        Some(changed) => Err(refuse(changed)),
        None => Ok(()),
    }
}

/// The first tracked link of `now` whose position was stored with other
/// URLs only: "link 3 is now \"…\", was \"…\"".
fn changed_link(
    stored: &std::collections::HashMap<link_templates::TemplateKey, u32>,
    now: &[link_templates::TemplateKey],
) -> Option<String> {
    let clicks = |key: &&link_templates::TemplateKey| key.kind == crate::kind::LinkKind::Click;
    now.iter().filter(clicks).find_map(|key| {
        let at_position: Vec<&str> = stored
            .keys()
            .filter(clicks)
            .filter(|old| old.position == key.position)
            .map(|old| old.url.as_str())
            .collect();
        let was = at_position.first()?;
        (!at_position.contains(&key.url.as_str()))
            .then(|| format!("link {} is now {:?}, was {was:?}", key.position, key.url))
    })
}

/// The base URL of a mailing's tracked links: the verified tracking domain
/// of its `from` domain (or of that domain's registrable domain), with the
/// scheme, port and path of `base_url`; else `base_url` itself
/// (docs/domains.md, "Tracking domains").
pub(super) async fn tracking_base(
    pool: &MySqlPool,
    base_url: &str,
    from: &str,
) -> Result<String, BuildError> {
    let Some(domain) = from_domain(from) else {
        return Ok(base_url.to_owned());
    };
    let mut host = tracking_domains::host_for_sender(pool, &domain).await?;
    let site = crate::letter::registrable_domain(&domain);
    if host.is_none() && site != domain {
        host = tracking_domains::host_for_sender(pool, &site).await?;
    }
    let Some(host) = host else {
        return Ok(base_url.to_owned());
    };
    let Ok(mut url) = url::Url::parse(base_url) else {
        return Ok(base_url.to_owned());
    };
    if url.set_host(Some(&host)).is_err() {
        return Ok(base_url.to_owned());
    }
    let text = url.as_str();
    // `Url` adds a `/` to an empty path; the base URL is written without one.
    Ok(if base_url.ends_with('/') {
        text.to_owned()
    } else {
        text.trim_end_matches('/').to_owned()
    })
}

/// The lowercase domain of a `from` mailbox (`News <news@Brand.example>`):
/// the sender whose tracking hosts serve the mailing's links.
pub(crate) fn from_domain(from: &str) -> Option<String> {
    let mailbox: lettre::message::Mailbox = from.parse().ok()?;
    Some(
        mailbox
            .email
            .domain()
            .trim_end_matches('.')
            .to_ascii_lowercase(),
    )
}
