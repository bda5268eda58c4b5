//! The link templates of live mailings, kept in memory by every server so
//! that a click keeps working while the database is away (docs/serve.md,
//! "Security", item 17): a sealed token names its template, and
//! a template's URL is the same in every letter (a personalised URL has
//! none), so its redirect needs no row.
//!
//! Loaded when the server starts, then followed: templates never change
//! and their ids only grow, so each refresh reads the ids above the last
//! one held (a build interns its templates before its first letter is
//! sent, so they are here within one refresh). Templates whose first token
//! is older than `--keep-days` are dropped; past [`MAX_TARGETS`] the oldest
//! ids go first.

use crate::store::link_templates::{self, LinkTemplate};
use crate::store::StoreError;
use crate::workers::Stopping;
use chrono::{NaiveDate, Utc};
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Most templates held: 10,000 live mailings of 100 links each.
pub const MAX_TARGETS: usize = 1_000_000;

/// Templates read per statement.
const PAGE: u32 = 10_000;

/// The templates held, by id.
#[derive(Default)]
pub struct OfflineTargets {
    held: RwLock<Held>,
    max: usize,
}

#[derive(Default)]
struct Held {
    by_id: HashMap<u32, Arc<LinkTemplate>>,
    /// The highest id read: the next refresh reads above it.
    last_id: u32,
}

impl OfflineTargets {
    /// Holding at most `max` templates.
    pub fn new(max: usize) -> OfflineTargets {
        OfflineTargets {
            held: RwLock::default(),
            max,
        }
    }

    /// The template `id`, if held.
    pub fn get(&self, id: u32) -> Option<Arc<LinkTemplate>> {
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        held.by_id.get(&id).cloned()
    }

    /// How many templates are held.
    pub fn len(&self) -> usize {
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        held.by_id.len()
    }

    /// No template held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The highest template id read so far.
    pub fn last_id(&self) -> u32 {
        self.held.read().unwrap_or_else(|e| e.into_inner()).last_id
    }

    /// Hold `templates` (read in id order), drop those first made before
    /// `kept_from`, and the lowest ids past the bound.
    pub fn add(&self, templates: Vec<LinkTemplate>, kept_from: NaiveDate) {
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        for template in templates {
            held.last_id = held.last_id.max(template.id);
            held.by_id.insert(template.id, Arc::new(template));
        }
        held.by_id.retain(|_, t| t.first_day >= kept_from);
        if held.by_id.len() > self.max {
            let mut ids: Vec<u32> = held.by_id.keys().copied().collect();
            ids.sort_unstable();
            let over = ids.len() - self.max;
            for id in &ids[..over] {
                held.by_id.remove(id);
            }
        }
    }

    /// Read the templates added since the last refresh (all of them, page
    /// by page); how many were read.
    pub async fn refresh(&self, pool: &MySqlPool, keep_days: u32) -> Result<usize, StoreError> {
        let kept_from = Utc::now().date_naive() - chrono::Days::new(u64::from(keep_days) + 1);
        let mut read = 0;
        loop {
            let page = link_templates::live_after(pool, self.last_id(), kept_from, PAGE).await?;
            let full = page.len() == PAGE as usize;
            read += page.len();
            self.add(page, kept_from);
            if !full {
                return Ok(read);
            }
        }
    }

    /// Refresh `every` ([`FOLLOW_EVERY`](crate::server::FOLLOW_EVERY) in
    /// `serve`) until stopping is asked for; a
    /// refresh the database does not answer is tried again next time.
    pub async fn follow(
        self: Arc<Self>,
        pool: MySqlPool,
        keep_days: u32,
        db_timeout: Duration,
        every: Duration,
        mut stopping: Stopping,
    ) {
        loop {
            let refresh = self.refresh(&pool, keep_days);
            match tokio::time::timeout(db_timeout.max(every), refresh).await {
                Ok(Ok(_)) => {
                    metrics::gauge!("linktrack_offline_targets").set(self.len() as f64);
                }
                Ok(Err(err)) => tracing::debug!(%err, "link templates not refreshed"),
                Err(_) => tracing::debug!("link templates not refreshed in time"),
            }
            tokio::select! {
                _ = stopping.requested() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::LinkKind;

    fn template(id: u32, first_day: &str) -> LinkTemplate {
        LinkTemplate {
            id,
            mailing_id: format!("m{}", id / 50),
            kind: LinkKind::Click,
            position: id % 50,
            url: format!("https://shop.example.com/products/{id}?ref=newsletter"),
            first_day: first_day.parse().unwrap(),
        }
    }

    #[test]
    fn templates_past_retention_and_past_the_bound_are_dropped() {
        let targets = OfflineTargets::new(3);
        let kept_from: NaiveDate = "2026-12-01".parse().unwrap();
        targets.add(
            vec![
                template(1, "2026-11-30"),
                template(2, "2026-12-01"),
                template(3, "2026-12-02"),
            ],
            kept_from,
        );
        assert!(targets.get(1).is_none(), "past retention");
        assert_eq!(targets.get(2).unwrap().url, template(2, "2026-12-01").url);
        targets.add(
            vec![template(4, "2026-12-02"), template(5, "2026-12-02")],
            kept_from,
        );
        assert_eq!(targets.len(), 3);
        assert!(targets.get(2).is_none(), "the lowest id went first");
        assert!(targets.get(5).is_some());
        assert_eq!(targets.last_id(), 5);
    }
}
