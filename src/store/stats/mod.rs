//! The reads behind the stats API and dashboard: per-mailing totals, links,
//! hours and bot reasons from the rollup tables (written by
//! [`super::rollup`]), and the saved creative for the click map.
//!
//! # Layout
//!
//! One file per question asked of the tables:
//! * `summary`: the whole summary of one mailing, totals and bot reasons;
//! * `per_link`: clicks per link position and their URLs;
//! * `late`: late events;
//! * `series`: opens and clicks per hour and per minute;
//! * `letters`: the letters built and how they were tracked;
//! * `mailings`: which mailing an id names, its creative, the index;
//! * `counts`: the plain figures the others fill.

mod counts;
mod late;
mod letters;
mod mailings;
mod per_link;
mod series;
mod summary;

pub use counts::{Counts, LateCounts, Split};
pub use late::LateSummary;
pub use letters::{
    add_letters_built, add_letters_by_mode, count_letters, letters_built, letters_counted,
    recount_letters_built, save_track_mode, tracking_summary, LettersByMode, TrackingSummary,
};
pub use mailings::{
    built_subject, colliding_mailing, ids_equal_in_collation, largest_creative, list_mailings,
    list_management, mailing_html, mailings_page, named_exactly, save_list_manage_url,
    save_mailing, save_sender_domain, sender_domain, MailingListing, MailingPageRow,
};
pub use per_link::{link_urls, LinkStats, TargetClicks};
pub use series::HourStats;
pub use summary::{summary, Classes, MailingSummary};
