//! The days of the daily partitions, planned: a partition `pYYYYMMDD`
//! holds the rows of that UTC day and is declared `VALUES LESS THAN
//! ('YYYY-MM-DD' + 1 day)`. What a run keeps, drops and adds ([`plan`]),
//! and the DDL text that carries a plan out, are pure: tested without a
//! database.

use chrono::{Days, NaiveDate};

/// How many days of links and events are kept. Shared by `rotate` (what to
/// drop) and the server (which tokens are expired without a database read).
pub const DEFAULT_KEEP_DAYS: u32 = 90;

/// How many days ahead partitions are made.
pub const DEFAULT_AHEAD_DAYS: u32 = 7;

/// The tables partitioned by day.
pub use crate::store::big_tables::PARTITIONED_TABLES;

/// One existing partition, as `information_schema.PARTITIONS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    /// The exclusive upper bound: rows with `inserted < upper` (and not in an
    /// earlier partition) live here.
    pub upper: NaiveDate,
    /// InnoDB's estimate; exact counts would need a scan.
    pub approx_rows: u64,
}

impl Partition {
    /// The last day this partition can hold.
    pub fn last_day(&self) -> NaiveDate {
        self.upper.pred_opt().unwrap_or(self.upper)
    }
}

/// The name of the partition holding `day`.
pub fn partition_name(day: NaiveDate) -> String {
    format!("p{}", day.format("%Y%m%d"))
}

/// What a run would change in one table, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TablePlan {
    /// `links`, `events`, or on a cluster's data node `links_03`, ….
    pub table: String,
    /// Partitions to drop: every day they hold is older than the cutoff.
    pub drop: Vec<Partition>,
    /// Days to add a partition for, ascending.
    pub add: Vec<NaiveDate>,
}

impl TablePlan {
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.add.is_empty()
    }

    /// The DDL that carries the plan out, at most one statement per kind of change.
    pub fn ddl(&self) -> Vec<String> {
        let mut statements = Vec::new();
        if !self.drop.is_empty() {
            let names: Vec<&str> = self.drop.iter().map(|p| p.name.as_str()).collect();
            statements.push(format!(
                "ALTER TABLE {} DROP PARTITION {}",
                self.table,
                names.join(", ")
            ));
        }
        if !self.add.is_empty() {
            let parts: Vec<String> = self
                .add
                .iter()
                .map(|day| {
                    let upper = day.checked_add_days(Days::new(1)).unwrap_or(*day);
                    format!(
                        "PARTITION {} VALUES LESS THAN ('{}')",
                        partition_name(*day),
                        upper
                    )
                })
                .collect();
            statements.push(format!(
                "ALTER TABLE {} ADD PARTITION ({})",
                self.table,
                parts.join(", ")
            ));
        }
        statements
    }
}

/// Retention and look-ahead for one run.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub today: NaiveDate,
    /// Create partitions through `today + ahead_days`.
    pub ahead_days: u32,
    /// Drop partitions whose every day is before `today - keep_days`; `None`
    /// drops nothing (plain `ensure`).
    pub keep_days: Option<u32>,
}

impl Policy {
    /// The first day that is kept; older days may be dropped.
    pub fn cutoff(&self) -> Option<NaiveDate> {
        self.keep_days
            .and_then(|keep| self.today.checked_sub_days(Days::new(u64::from(keep))))
    }
}

/// Work out what to drop and add, given a table's partitions in ascending order.
///
/// Guarantees, whatever the input: today and future days are never dropped,
/// the newest partition is never dropped (MySQL refuses to drop them all),
/// and a day already covered by an existing partition is never added.
pub fn plan(table: &str, existing: &[Partition], policy: &Policy) -> TablePlan {
    let mut drop = Vec::new();
    if let Some(cutoff) = policy.cutoff() {
        let cutoff = cutoff.min(policy.today);
        let droppable = existing.len().saturating_sub(1);
        drop = existing
            .iter()
            .take(droppable)
            .take_while(|p| p.upper <= cutoff)
            .cloned()
            .collect();
    }

    // Everything below the newest upper bound is already covered.
    let covered_until = existing.iter().map(|p| p.upper).max();
    let mut add = Vec::new();
    for offset in 0..=policy.ahead_days {
        let Some(day) = policy.today.checked_add_days(Days::new(u64::from(offset))) else {
            break;
        };
        if covered_until.is_none_or(|upper| day >= upper) {
            add.push(day);
        }
    }
    TablePlan {
        table: table.to_owned(),
        drop,
        add,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn daily(first: &str, days: u64) -> Vec<Partition> {
        let mut parts = vec![Partition {
            name: "p19700101".into(),
            upper: d("1970-01-02"),
            approx_rows: 0,
        }];
        for i in 0..days {
            let day = d(first).checked_add_days(Days::new(i)).unwrap();
            parts.push(Partition {
                name: partition_name(day),
                upper: day.succ_opt().unwrap(),
                approx_rows: 10,
            });
        }
        parts
    }

    #[test]
    fn ensure_on_a_fresh_table_adds_today_through_ahead() {
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 7,
            keep_days: None,
        };
        let plan = plan("links", &daily("2026-01-01", 0), &policy);
        assert!(plan.drop.is_empty());
        assert_eq!(plan.add.first(), Some(&d("2026-11-22")));
        assert_eq!(plan.add.last(), Some(&d("2026-11-29")));
        assert_eq!(plan.add.len(), 8);
        assert_eq!(
            plan.ddl(),
            vec![format!(
                "ALTER TABLE links ADD PARTITION ({})",
                (22..=29)
                    .map(|n| format!(
                        "PARTITION p202611{n} VALUES LESS THAN ('2026-11-{}')",
                        n + 1
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )]
        );
    }

    #[test]
    fn ensure_adds_only_missing_days() {
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 7,
            keep_days: None,
        };
        let plan = plan("links", &daily("2026-11-20", 5), &policy);
        assert_eq!(
            plan.add,
            (25..=29)
                .map(|n| d(&format!("2026-11-{n}")))
                .collect::<Vec<_>>()
        );
        let again = super::plan("links", &daily("2026-11-20", 10), &policy);
        assert!(again.is_empty());
    }

    #[test]
    fn rotate_drops_exactly_the_days_before_the_cutoff() {
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 2,
            keep_days: Some(3),
        };
        let plan = plan("events", &daily("2026-11-15", 10), &policy);
        // cutoff 2026-11-19: days 15..=18 and the epoch partition go; 19 stays.
        let dropped: Vec<&str> = plan.drop.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            dropped,
            [
                "p19700101",
                "p20261115",
                "p20261116",
                "p20261117",
                "p20261118"
            ]
        );
        assert!(plan.add.is_empty(), "24 is already covered");
    }

    #[test]
    fn rotate_never_drops_today_the_future_or_the_last_partition() {
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 0,
            keep_days: Some(0),
        };
        let plan = plan("links", &daily("2026-11-20", 5), &policy);
        assert!(plan.drop.iter().all(|p| p.last_day() < d("2026-11-22")));
        // A table whose only partitions are long expired keeps its newest.
        let stale = daily("2020-01-01", 3);
        let plan = super::plan("links", &stale, &policy);
        assert_eq!(plan.drop.len(), stale.len() - 1);
        assert_eq!(plan.add, vec![d("2026-11-22")]);
    }

    #[test]
    fn a_multi_day_partition_goes_only_when_all_its_days_are_old() {
        let parts = vec![
            Partition {
                name: "p20261110".into(),
                upper: d("2026-11-11"),
                approx_rows: 0,
            },
            // holds 11..=20 because the cron did not run for a while
            Partition {
                name: "p20261120".into(),
                upper: d("2026-11-21"),
                approx_rows: 0,
            },
            Partition {
                name: "p20261121".into(),
                upper: d("2026-11-22"),
                approx_rows: 0,
            },
        ];
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 0,
            keep_days: Some(5),
        };
        let plan = plan("links", &parts, &policy);
        assert_eq!(plan.drop.len(), 1);
        assert_eq!(plan.drop[0].name, "p20261110");
    }
}
