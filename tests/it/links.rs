use crate::common::{days_ago, today, token_on, TestDb};
use linktrack::store::links::{self, LinkKind, NewLink, LOOKUP_SQL};
use linktrack::store::partitions::partition_name;
use linktrack::token::Token;
use serde_json::Value;

fn link(token: Token, url: &str, email: &str) -> NewLink {
    NewLink {
        token,
        kind: LinkKind::Click,
        mailing_id: "weekly-47".into(),
        letter_id: 42,
        email: email.into(),
        position: 3,
        url: url.into(),
        meta: Some(serde_json::json!({"tag": "ruby"})),
    }
}

#[tokio::test]
async fn lookup_returns_the_stored_row_exactly() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let long_url = format!("https://example.com/track?{}", "q=%E3%81%82&".repeat(600));
    let rows = vec![
        link(
            token_on(today()),
            "https://example.com/a?x=1&y=2",
            "ann@example.com",
        ),
        link(token_on(days_ago(1)), &long_url, "山田@example.jp"),
    ];
    assert_eq!(links::insert(&db.pool, &rows).await.unwrap(), 2);
    for row in &rows {
        let found = links::lookup(&db.pool, &row.token)
            .await
            .unwrap()
            .expect("row found");
        assert_eq!(
            (found.url.as_str(), found.email.as_str()),
            (row.url.as_str(), row.email.as_str())
        );
        assert_eq!(
            (found.kind, found.letter_id, found.position),
            (LinkKind::Click, 42, 3)
        );
        assert_eq!(found.mailing_id, "weekly-47");
    }
    assert!(long_url.len() > 5000);
    assert_eq!(
        links::lookup(&db.pool, &token_on(today())).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn the_same_uuid_cannot_be_stored_twice_for_a_day() {
    let db = TestDb::with_days_since(today()).await;
    let token = token_on(today());
    links::insert(
        &db.pool,
        &[link(token, "https://a.example/", "a@example.com")],
    )
    .await
    .unwrap();
    let second = links::insert(
        &db.pool,
        &[link(token, "https://b.example/", "b@example.com")],
    )
    .await;
    // Refused by UNIQUE (uuid, inserted), not by anything else.
    assert!(
        matches!(
            &second,
            Err(linktrack::store::StoreError::Sqlx(sqlx::Error::Database(e)))
                if e.is_unique_violation()
        ),
        "{second:?}"
    );
}

/// Every `partitions` array anywhere in an EXPLAIN FORMAT=JSON document.
fn partitions_in(plan: &Value, found: &mut Vec<Vec<String>>) {
    match plan {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "partitions" {
                    let names = value.as_array().into_iter().flatten();
                    found.push(
                        names
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect(),
                    );
                } else {
                    partitions_in(value, found);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| partitions_in(v, found)),
        _ => {}
    }
}

/// A database with 50 links on each of the last 13 days, analyzed.
async fn links_of_thirteen_days() -> (TestDb, Vec<NewLink>) {
    let db = TestDb::with_days_since(days_ago(12)).await;
    let mut rows = Vec::new();
    for n in 0..=12u64 {
        let day = days_ago(n);
        rows.extend((0..50).map(|i| {
            link(
                token_on(day),
                &format!("https://example.com/{n}/{i}"),
                &format!("r{n}.{i}@example.com"),
            )
        }));
    }
    links::insert(&db.pool, &rows).await.unwrap();
    sqlx::query("ANALYZE TABLE links")
        .execute(&db.pool)
        .await
        .unwrap();
    (db, rows)
}

/// The partition lists (sorted) of a plan from `EXPLAIN FORMAT=JSON`.
pub(crate) fn partitions_of(plan: &str) -> Vec<Vec<String>> {
    let plan: Value = serde_json::from_str(plan).unwrap();
    let mut found = Vec::new();
    partitions_in(&plan, &mut found);
    for partitions in &mut found {
        partitions.sort();
    }
    found
}

#[tokio::test]
async fn the_lookup_reads_exactly_one_partition() {
    let (db, rows) = links_of_thirteen_days().await;
    let tokens: Vec<_> = rows
        .chunks(50)
        .map(|day| (day[17].token.date(), day[17].token))
        .collect();
    for (day, token) in tokens {
        let plan: String = sqlx::query_scalar(&format!("EXPLAIN FORMAT=JSON {LOOKUP_SQL}"))
            .bind(&token.as_bytes()[..])
            .bind(token.date())
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(
            partitions_of(&plan),
            vec![vec![partition_name(day)]],
            "plan: {plan}"
        );
    }
}

#[tokio::test]
async fn a_batch_lookup_reads_one_partition_per_day_it_names() {
    let (db, rows) = links_of_thirteen_days().await;
    // Five tokens of three days, and one token no link has.
    let days = [days_ago(0), days_ago(4), days_ago(9)];
    let mut wanted: Vec<Token> = rows
        .iter()
        .filter(|r| days.contains(&r.token.date()))
        .step_by(30)
        .map(|r| r.token)
        .collect();
    assert_eq!(wanted.len(), 5);
    let unknown = token_on(days_ago(4));
    wanted.push(unknown);

    // The statement lookup_many prepares, its slots padded as it pads them;
    // the values written in as literals, because the plan quotes them and
    // JSON cannot hold a bound token's raw bytes.
    let slots = links::lookup_many_slots(wanted.len());
    assert_eq!(slots, 8);
    let mut sql = links::lookup_many_sql(slots).to_owned();
    for token in wanted.iter().chain(std::iter::repeat(&unknown)).take(slots) {
        let values = format!("(X'{token}', '{}')", token.date());
        sql = sql.replacen("(?, ?)", &values, 1);
    }
    assert!(!sql.contains('?'), "{sql}");
    let plan: String = sqlx::query_scalar(&format!("EXPLAIN FORMAT=JSON {sql}"))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let mut expected: Vec<String> = days.iter().map(|d| partition_name(*d)).collect();
    expected.sort();
    assert_eq!(partitions_of(&plan), vec![expected], "plan: {plan}");

    let links = links::lookup_many(&db.pool, &wanted).await.unwrap();
    assert_eq!(links.len(), 5);
    assert!(!links.contains_key(&unknown));
    for token in &wanted[..5] {
        let row = rows.iter().find(|r| r.token == *token).unwrap();
        let stored = &links[token];
        assert_eq!((&stored.url, &stored.email), (&row.url, &row.email));
    }
    assert!(links::lookup_many(&db.pool, &[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_batch_lookup_of_several_statements_finds_every_link_once() {
    let (db, rows) = links_of_thirteen_days().await;
    // 650 tokens and 3 unknown ones: statements of 256, 256 and 141 padded
    // to 256 (the padding repeats the last token, here an unknown one).
    let mut wanted: Vec<Token> = rows.iter().map(|r| r.token).collect();
    let unknown: Vec<Token> = (0..3).map(|d| token_on(days_ago(d))).collect();
    wanted.extend(&unknown);
    assert!(wanted.len() > 2 * links::MOST_SLOTS);

    let found = links::lookup_many(&db.pool, &wanted).await.unwrap();

    assert_eq!(found.len(), rows.len());
    for row in &rows {
        let stored = &found[&row.token];
        assert_eq!((&stored.url, &stored.email), (&row.url, &row.email));
    }
    assert!(unknown.iter().all(|t| !found.contains_key(t)));
}
