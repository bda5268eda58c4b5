//! The stats API's test token and secret, and a database with rolled-up
//! fixture traffic. Its requests go through the harness's one client
//! (`common::client`).

use crate::common::stats::{letters, record, traffic, MAILING};
use crate::common::{days_ago, TestDb};
use linktrack::store::{rollup, stats};
use std::path::{Path, PathBuf};

pub const TOKEN: &str = "test-token-0123456789";

pub const SECRET: &str = "test-secret";

/// A database with the fixture mailing, its traffic rolled up, and its HTML saved.
pub async fn rolled_db() -> TestDb {
    let (d1, d2) = (days_ago(1), days_ago(0));
    let db = TestDb::with_days_since(d1).await;
    let letters = letters(&db.pool, d1, 3).await;
    record(&db.pool, &traffic(&letters, d1, d2)).await;
    rollup::rollup(&db.pool, 1000).await.unwrap();
    let html = std::fs::read_to_string(fixture_letter()).unwrap();
    stats::save_mailing(
        &db.pool,
        &crate::common::mailing_id(MAILING),
        "November news",
        &html,
    )
    .await
    .unwrap();
    db
}

pub fn fixture_letter() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/stats_letter.html")
}
