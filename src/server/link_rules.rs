//! Where a click leads now: every server holds the sender's rules for
//! mailings' links in memory ([`LinkRules`]): the links repointed after
//! sending (`link_repoints`) and the mailings' UTM tags (`mailing_utm`,
//! rendered per position with `mailing_links`' names and UTM choices). A
//! worker reads what was added since its last look every
//! [`FOLLOW_EVERY`](crate::server::FOLLOW_EVERY), so a repoint reaches every server within seconds.
//!
//! The redirect applies them after the link is found (from the link cache
//! or the database), so the cache never needs invalidating: it holds the
//! rows as built, and the rules are a lookup beside it. A server whose
//! mailings have no rules reads one atomic flag per click; otherwise one
//! hash lookup by mailing id under a read lock.

use crate::letter::link_template::Refill;
use crate::letter::utm::{add_parameters, EncodedParameter, UtmLink, UtmTags};
use crate::locks::{LockEvenPoisoned, ReadWriteEvenPoisoned};
use crate::mailing_id::MailingId;
use crate::store::link_rules::{self, Repoint, StoredUtm};
use crate::store::StoreError;
use sqlx::MySqlPool;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Rows read per statement while catching up.
const ROWS_PER_READ: u32 = 5_000;

/// The rules of every mailing that has any, shared by the handlers.
#[derive(Clone, Default)]
pub struct LinkRules(Arc<Inner>);

#[derive(Default)]
struct Inner {
    /// Some mailing has rules: the redirect looks them up.
    any: AtomicBool,
    table: RwLock<Arc<RulesTable>>,
    /// The newest rows taken in (applying a row again changes nothing).
    seen: Mutex<Seen>,
}

#[derive(Default, Clone, Copy)]
struct Seen {
    repoint: u64,
    utm: u64,
}

#[derive(Default, Clone)]
struct RulesTable {
    mailings: HashMap<String, Arc<MailingRules>>,
}

/// One mailing's rules.
#[derive(Default, Clone, Debug)]
struct MailingRules {
    /// Where each repointed position leads now, for every letter.
    targets: HashMap<u32, Arc<str>>,
    /// Where one letter's repointed link leads now (`--recipient`).
    letter_targets: HashMap<(u32, u64), Arc<str>>,
    /// Positions repointed to a target with fields, filled in per letter
    /// from the link's stored URL.
    refills: HashMap<u32, Arc<Refill>>,
    /// The mailing's UTM tags, when it has any.
    utm: Option<UtmTags>,
    /// The tags rendered per position of the creative (empty: the link
    /// says `data-linktrack-utm="off"`).
    utm_by_position: HashMap<u32, Arc<[EncodedParameter]>>,
    /// The tags rendered for positions the creative does not have (a
    /// loop's extra links), filled on their first click: rendering is a
    /// template run, far dearer than the rest of a redirect. Replaced, not
    /// cleared, when the tags change, so a clone made before keeps its own.
    utm_unnamed: Arc<RwLock<HashMap<u32, Arc<[EncodedParameter]>>>>,
}

/// Positions outside the creative whose tags a mailing keeps rendered; a
/// letter has a bounded number of links, so only a runaway loop gets past
/// it, and its further positions are rendered per click.
const UNNAMED_POSITIONS_KEPT: usize = 4_096;

impl MailingRules {
    /// The tags for a click on `position`, rendered once per position.
    fn utm_parameters(
        &self,
        tags: &UtmTags,
        mailing_id: &str,
        position: u32,
    ) -> Arc<[EncodedParameter]> {
        if let Some(parameters) = self.utm_by_position.get(&position) {
            return Arc::clone(parameters);
        }
        if let Some(parameters) = self.utm_unnamed.read_even_poisoned().get(&position) {
            return Arc::clone(parameters);
        }
        let parameters: Arc<[EncodedParameter]> =
            Arc::from(render(tags, mailing_id, position, None));
        let mut unnamed = self.utm_unnamed.write_even_poisoned();
        if unnamed.len() < UNNAMED_POSITIONS_KEPT {
            unnamed.insert(position, Arc::clone(&parameters));
        }
        parameters
    }
}

impl LinkRules {
    /// Where a click on `stored` (the link's URL as built) leads: its
    /// repointed target, if any, with the mailing's UTM tags added.
    /// Borrowed when no rule applies.
    pub fn target<'u>(
        &self,
        mailing_id: &str,
        position: u32,
        letter_id: u64,
        stored: &'u str,
    ) -> Cow<'u, str> {
        if !self.0.any.load(Ordering::Acquire) {
            return Cow::Borrowed(stored);
        }
        let Some(rules) = self.mailing(mailing_id) else {
            return Cow::Borrowed(stored);
        };
        let repointed = rules
            .letter_targets
            .get(&(position, letter_id))
            .or_else(|| rules.targets.get(&position));
        let url: Cow<'u, str> = match repointed {
            Some(target) => Cow::Owned(target.to_string()),
            None => match rules.refills.get(&position) {
                // A stored URL its template does not make (only a row
                // changed by hand) keeps leading where it was built to.
                Some(refill) => refill
                    .apply(stored)
                    .map_or(Cow::Borrowed(stored), Cow::Owned),
                None => Cow::Borrowed(stored),
            },
        };
        let Some(tags) = &rules.utm else {
            return url;
        };
        // A position the creative does not have (a loop's extra link) gets
        // the tags with no name.
        let parameters = rules.utm_parameters(tags, mailing_id, position);
        let tagged = match add_parameters(&url, &parameters) {
            Cow::Owned(tagged) => Some(tagged),
            Cow::Borrowed(_) => None,
        };
        tagged.map_or(url, Cow::Owned)
    }

    fn mailing(&self, mailing_id: &str) -> Option<Arc<MailingRules>> {
        self.0
            .table
            .read_even_poisoned()
            .mailings
            .get(mailing_id)
            .cloned()
    }

    /// Take in the repoints and UTM tags written since the last call.
    /// Returns how many rows were new.
    pub async fn refresh(&self, pool: &MySqlPool) -> Result<usize, StoreError> {
        let mut seen = *self.0.seen.lock_even_poisoned();
        let repoints = read_all(
            seen.repoint,
            |after| link_rules::repoints_since(pool, after, ROWS_PER_READ),
            |r: &Repoint| r.id,
        )
        .await?;
        let utms = read_all(
            seen.utm,
            |after| link_rules::utm_since(pool, after, ROWS_PER_READ),
            |u: &StoredUtm| u.id,
        )
        .await?;
        if repoints.is_empty() && utms.is_empty() {
            return Ok(0);
        }
        let refills = refills(pool, &repoints).await?;
        let mut table = RulesTable::clone(&self.0.table.read_even_poisoned());
        for repoint in &repoints {
            let rules = Arc::make_mut(
                table
                    .mailings
                    .entry(repoint.mailing_id.clone())
                    .or_default(),
            );
            take_in(rules, repoint, refills.get(&repoint.id).cloned());
            seen.repoint = seen.repoint.max(repoint.id);
        }
        for utm in &utms {
            let by_position = utm_by_position(pool, utm).await?;
            let rules = Arc::make_mut(table.mailings.entry(utm.mailing_id.clone()).or_default());
            rules.utm = (!utm.tags.is_empty()).then(|| utm.tags.clone());
            rules.utm_by_position = by_position;
            rules.utm_unnamed = Arc::default();
            seen.utm = seen.utm.max(utm.id);
        }
        let any = !table.mailings.is_empty();
        *self.0.table.write_even_poisoned() = Arc::new(table);
        self.0.any.store(any, Ordering::Release);
        *self.0.seen.lock_even_poisoned() = seen;
        Ok(repoints.len() + utms.len())
    }

    /// Refresh `every` ([`FOLLOW_EVERY`](crate::server::FOLLOW_EVERY) in
    /// `serve`) until stopped (`serve` runs it as a
    /// worker). A failure is logged and retried at the next tick.
    pub async fn run(
        self,
        pool: MySqlPool,
        every: Duration,
        mut stopping: crate::workers::Stopping,
    ) {
        // `serve` read them just before starting this worker.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = stopping.requested() => return,
                _ = tick.tick() => {}
            }
            match self.refresh(&pool).await {
                Ok(0) => {}
                Ok(rows) => tracing::info!(rows, "link repoints and UTM tags taken in"),
                Err(err) => tracing::warn!(%err, "link repoints and UTM tags not read; retrying"),
            }
        }
    }
}

/// Apply one repoint, newer than every one applied before: a repoint of a
/// position for every letter replaces the letters' own older ones.
fn take_in(rules: &mut MailingRules, repoint: &Repoint, refill: Option<Arc<Refill>>) {
    let position = repoint.position;
    if let Some(letter) = repoint.letter_id {
        let target: Arc<str> = Arc::from(repoint.to.as_str());
        rules.letter_targets.insert((position, letter), target);
        return;
    }
    if refill.is_none() && repoint.to.contains("{{") {
        return; // not applied, said by `refills`
    }
    rules.letter_targets.retain(|(p, _), _| *p != position);
    match refill {
        Some(refill) => {
            rules.targets.remove(&position);
            rules.refills.insert(position, refill);
        }
        None => {
            rules.refills.remove(&position);
            rules
                .targets
                .insert(position, Arc::from(repoint.to.as_str()));
        }
    }
}

/// The refills of the repoints (for every letter) whose target has
/// fields, by repoint id: each made from its position's URL as built. One
/// the `repoint` check would have refused (only a row written by hand) is
/// left out and said, so its letters keep their last target.
async fn refills(
    pool: &MySqlPool,
    repoints: &[Repoint],
) -> Result<HashMap<u64, Arc<Refill>>, StoreError> {
    let mut built: HashMap<String, HashMap<u32, String>> = HashMap::new();
    let mut refills = HashMap::new();
    for repoint in repoints {
        if repoint.letter_id.is_some() || !repoint.to.contains("{{") {
            continue;
        }
        if !built.contains_key(&repoint.mailing_id) {
            let urls = match MailingId::parse(&repoint.mailing_id) {
                Ok(mailing_id) => link_rules::positions(pool, &mailing_id)
                    .await?
                    .into_iter()
                    .map(|link| (link.position, link.source_url))
                    .collect(),
                Err(_) => HashMap::new(),
            };
            built.insert(repoint.mailing_id.clone(), urls);
        }
        let source = built
            .get(&repoint.mailing_id)
            .and_then(|urls| urls.get(&repoint.position))
            .map_or("", String::as_str);
        match Refill::new(source, &repoint.to) {
            Ok(refill) => {
                refills.insert(repoint.id, Arc::new(refill));
            }
            Err(err) => tracing::warn!(
                %err,
                mailing_id = %repoint.mailing_id,
                position = repoint.position,
                "repoint with fields not applied"
            ),
        }
    }
    Ok(refills)
}

/// Every row after `after`, read `ROWS_PER_READ` at a time.
async fn read_all<T, F, Fut>(
    mut after: u64,
    read: F,
    id: impl Fn(&T) -> u64,
) -> Result<Vec<T>, StoreError>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, StoreError>>,
{
    let mut all = Vec::new();
    loop {
        let rows = read(after).await?;
        let full = rows.len() >= ROWS_PER_READ as usize;
        if let Some(last) = rows.last() {
            after = id(last);
        }
        all.extend(rows);
        if !full {
            return Ok(all);
        }
    }
}

/// A mailing's UTM tags rendered for each position of its creative.
async fn utm_by_position(
    pool: &MySqlPool,
    utm: &StoredUtm,
) -> Result<HashMap<u32, Arc<[EncodedParameter]>>, StoreError> {
    if utm.tags.is_empty() {
        return Ok(HashMap::new());
    }
    let Ok(mailing_id) = MailingId::parse(&utm.mailing_id) else {
        return Ok(HashMap::new());
    };
    let positions = link_rules::positions(pool, &mailing_id).await?;
    Ok(positions
        .into_iter()
        .map(|link| {
            let parameters = if link.utm {
                render(
                    &utm.tags,
                    &utm.mailing_id,
                    link.position,
                    link.name.as_deref(),
                )
            } else {
                Vec::new()
            };
            (link.position, Arc::from(parameters))
        })
        .collect())
}

/// The tags for one link; a tag that fails to render (the build checked
/// them, so only a row written by hand) is left out, and said.
fn render(
    tags: &UtmTags,
    mailing_id: &str,
    position: u32,
    name: Option<&str>,
) -> Vec<EncodedParameter> {
    let link = UtmLink {
        mailing_id,
        position,
        name: name.unwrap_or_default(),
    };
    tags.render(link).unwrap_or_else(|err| {
        let err = crate::error_report::chain(&err);
        tracing::warn!(%err, mailing_id, "UTM tags not added");
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn campaign_by_position() -> UtmTags {
        UtmTags {
            campaign: Some("{{ mailing_id }}-{{ position }}".to_owned()),
            ..UtmTags::default()
        }
    }

    #[test]
    fn a_position_outside_the_creative_is_tagged_and_rendered_once() {
        let tags = campaign_by_position();
        let rules = MailingRules {
            utm: Some(tags.clone()),
            ..MailingRules::default()
        };
        let first = rules.utm_parameters(&tags, "m1", 7);
        assert_eq!(
            add_parameters("https://a.example/x", &first),
            "https://a.example/x?utm_campaign=m1-7"
        );
        let again = rules.utm_parameters(&tags, "m1", 7);
        assert!(
            Arc::ptr_eq(&first, &again),
            "rendered again on the second click"
        );
        let other = rules.utm_parameters(&tags, "m1", 8);
        assert_eq!(
            add_parameters("https://a.example/x", &other),
            "https://a.example/x?utm_campaign=m1-8"
        );
    }

    #[test]
    fn positions_past_the_bound_are_still_tagged() {
        let tags = campaign_by_position();
        let rules = MailingRules::default();
        for position in 0..u32::try_from(UNNAMED_POSITIONS_KEPT).unwrap_or(u32::MAX) {
            rules.utm_parameters(&tags, "m1", position);
        }
        let past = rules.utm_parameters(&tags, "m1", 999_999);
        assert_eq!(
            add_parameters("https://a.example/", &past),
            "https://a.example/?utm_campaign=m1-999999"
        );
        assert_eq!(
            rules.utm_unnamed.read_even_poisoned().len(),
            UNNAMED_POSITIONS_KEPT
        );
    }
}
