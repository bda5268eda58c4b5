//! bench_stats, issue 42's reads: what the mailing page and the breakdown
//! endpoints read, each timed (median of `--runs`) against the brute-force
//! `GROUP BY` over `events` that gives the same figures, and checked to
//! agree with it; then the same pages over HTTP through the real server
//! (`App`, the wiring `serve` uses) on a loopback port.
//!
//! Kept apart from the rollup's measurements in `bench_stats.rs`.

use super::{check_agree, ms, mysql_client, Args, Naive};
use linktrack::address::mailbox_provider;
use linktrack::bots::clients::Classifier;
use linktrack::journal::segments::JournalSettings;
use linktrack::server::{App, AppSettings};
use linktrack::store::stats::{self, HourStats, LinkStats, MailingSummary};
use linktrack::store::{bounces, breakdowns};
use sqlx::MySqlPool;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const MAILING: &str = "bench-0";

/// [`MAILING`] as the store's functions take it.
fn mailing_id() -> linktrack::mailing_id::MailingId {
    linktrack::mailing_id::MailingId::parse(MAILING).expect("a valid mailing id")
}
/// The bearer token of the bench's server.
const TOKEN: &str = "bench-stats-token";

/// One line of the table: a read, its brute-force equivalent, the ratio.
fn row(what: &str, fast: Duration, runs: usize, slow: Option<(Duration, usize)>) {
    match slow {
        Some((slow, slow_runs)) => println!(
            "{what:<34} {:>9.2} ms  median of {runs}; brute force {:>10.1} ms (median of {slow_runs}): {:.0}x",
            ms(fast),
            ms(slow),
            slow.as_secs_f64() / fast.as_secs_f64()
        ),
        None => println!("{what:<34} {:>9.2} ms  median of {runs}", ms(fast)),
    }
}

/// Time `f` `runs` times; the median, and the last result.
async fn timed<T, F, Fut>(runs: usize, mut f: F) -> anyhow::Result<(Duration, T)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        last = Some(f().await?);
        times.push(started.elapsed());
    }
    times.sort();
    let last = last.ok_or_else(|| anyhow::anyhow!("no run"))?;
    Ok((times[times.len() / 2], last))
}

pub async fn measure(args: &Args, pool: &MySqlPool) -> anyhow::Result<()> {
    let db: String = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(pool)
        .await?;
    prepare(args, &db, pool).await?;
    // What the rollup has counted: every event up to its watermark (the
    // bench's ids grow with time, partition after partition). The brute
    // force reads the same events, so a run stopped in its rollup is
    // measured on what it rolled.
    let rolled: Option<u64> = sqlx::query_scalar("SELECT MAX(last_id) FROM rollup_state")
        .fetch_one(pool)
        .await?;
    let rolled = rolled.unwrap_or(0);
    let scope = Scope(rolled);
    let unrolled: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE id > ?")
        .bind(rolled)
        .fetch_one(pool)
        .await?;
    if unrolled > 0 {
        println!("page reads: {unrolled} events above the rollup's watermark {rolled} are left out of the brute force too");
    }
    let events: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM events WHERE mailing_id = ? AND {}",
        scope.sql()
    ))
    .bind(MAILING)
    .fetch_one(pool)
    .await?;
    let all_events: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM events WHERE {}",
        scope.sql()
    ))
    .fetch_one(pool)
    .await?;
    let delivered: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM deliveries WHERE mailing_id = ?")
        .bind(MAILING)
        .fetch_one(pool)
        .await?;
    println!(
        "page reads: {MAILING} has {events} events ({all_events} in all), {delivered} letters delivered"
    );
    let runs = args.runs;
    let slow_runs = args.naive_runs.max(1);

    // The mailing page's data, store call by store call, as
    // server::stats::dashboard::mailing makes them.
    let (summary_t, summary) = timed(runs, || async {
        stats::summary(pool, &mailing_id())
            .await?
            .ok_or_else(|| anyhow::anyhow!("no summary of {MAILING}"))
    })
    .await?;
    let (html_t, _) = timed(runs, || async {
        Ok(stats::mailing_html(pool, &mailing_id()).await?)
    })
    .await?;
    let (mailing_bd_t, mailing_bd) = timed(runs, || async {
        Ok(breakdowns::read(pool, Some(MAILING)).await?)
    })
    .await?;
    let (overall_bd_t, overall_bd) =
        timed(runs, || async { Ok(breakdowns::read(pool, None).await?) }).await?;
    let (bounces_t, _) = timed(runs, || async {
        Ok(bounces::mailing_summary(pool, &mailing_id(), summary.letters_built).await?)
    })
    .await?;

    // The same figures by brute force, checked against the rollups'.
    let (naive_totals_t, totals) = timed(slow_runs, || async {
        naive_totals(pool, MAILING, scope).await
    })
    .await?;
    check_agree(&summary, &totals)?;
    let (naive_series_t, series) = timed(slow_runs, || async {
        naive_series(pool, MAILING, scope).await
    })
    .await?;
    series.check(&summary)?;
    let (naive_mailing_bd_t, brute) = timed(slow_runs, || async {
        naive_breakdowns(pool, Some(MAILING), scope).await
    })
    .await?;
    check_breakdowns("breakdowns of bench-0", &mailing_bd, &brute)?;
    let (naive_overall_bd_t, brute) = timed(slow_runs, || async {
        naive_breakdowns(pool, None, scope).await
    })
    .await?;
    check_breakdowns("breakdowns overall", &overall_bd, &brute)?;
    println!(
        "page reads agree with the brute-force GROUP BYs: totals and unique letters, links, \
         hours, minutes, bot reasons, every breakdown (per mailing and overall, opens and clicks, \
         humans and bots)"
    );

    let page_store = summary_t + html_t + mailing_bd_t;
    let page_naive = naive_totals_t + naive_series_t + naive_mailing_bd_t;
    row(
        "summary (totals, links, series)",
        summary_t,
        runs,
        Some((naive_totals_t + naive_series_t, slow_runs)),
    );
    row("  of which bounce figures", bounces_t, runs, None);
    row("creative (click map)", html_t, runs, None);
    row(
        "breakdowns of the mailing",
        mailing_bd_t,
        runs,
        Some((naive_mailing_bd_t, slow_runs)),
    );
    row(
        "breakdowns overall",
        overall_bd_t,
        runs,
        Some((naive_overall_bd_t, slow_runs)),
    );
    row(
        "mailing page, store calls summed",
        page_store,
        runs,
        Some((page_naive, slow_runs)),
    );

    over_http(
        args,
        pool,
        &mailing_bd,
        page_naive,
        naive_mailing_bd_t,
        naive_overall_bd_t,
    )
    .await
}

/// Deliveries, a few bounces and the creative of bench-0, when a reused
/// database has none yet (the page reads them), and the builder's count
/// of letters built.
async fn prepare(args: &Args, db: &str, pool: &MySqlPool) -> anyhow::Result<()> {
    let delivered: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM deliveries WHERE mailing_id = ?")
        .bind(MAILING)
        .fetch_one(pool)
        .await?;
    if delivered == 0 {
        let started = Instant::now();
        let letters = args.delivered.unwrap_or(args.letters);
        mysql_client::load_stdin(
            db,
            "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE deliveries \
             (mailing_id, letter_id, status, reply, at)",
            |out| {
                for letter in 1..=letters {
                    writeln!(
                        out,
                        "{MAILING}\t{letter}\tdelivered\t250 2.0.0 Ok: queued\t2026-11-20 10:00:00"
                    )?;
                }
                Ok(())
            },
        )?;
        // Loaded behind the ledger's back, as an older release's rows are
        // when the delivered count's migration finds them: counted the
        // migration's way.
        sqlx::query(
            "INSERT INTO stats_deliveries (mailing_id, delivered) \
             SELECT mailing_id, COUNT(*) FROM deliveries WHERE status = 'delivered' \
             AND mailing_id = ? GROUP BY mailing_id",
        )
        .bind(MAILING)
        .execute(pool)
        .await?;
        // One letter in a hundred bounced hard, one in 500 complained.
        mysql_client::load_stdin(
            db,
            "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE bounces \
             (@key, email, mailing_id, letter_id, kind, status, action, received_at) \
             SET source_key = UNHEX(SHA2(@key, 256))",
            |out| {
                for letter in (1..=letters).filter(|l| l % 100 == 0 || l % 500 == 7) {
                    let (kind, status, action) = if letter % 100 == 0 {
                        ("hard", "5.1.1", "suppressed")
                    } else {
                        ("complaint", "abuse", "suppressed")
                    };
                    writeln!(
                        out,
                        "b{letter}\t{}\t{MAILING}\t{letter}\t{kind}\t{status}\t{action}\t2026-11-20 11:00:00",
                        super::address(letter)
                    )?;
                }
                Ok(())
            },
        )?;
        println!(
            "load deliveries      {:>8.1} s  ({letters} letters of {MAILING} delivered, 1% bounced)",
            started.elapsed().as_secs_f64()
        );
    }
    if stats::mailing_html(pool, &mailing_id()).await?.is_none() {
        let mut html = String::from("<html><body><h1>Bench</h1>");
        for p in 1..=super::LINKS_PER_LETTER {
            html.push_str(&format!(
                "<p><a href=\"https://example.com/article/{p}\">Article {p}</a></p>"
            ));
        }
        html.push_str("</body></html>");
        stats::save_mailing(pool, &mailing_id(), "Bench mailing", &html).await?;
    }
    if stats::letters_counted(pool, &mailing_id()).await?.is_none() {
        let mut conn = pool.acquire().await?;
        stats::add_letters_built(&mut conn, MAILING, args.letters).await?;
    }
    Ok(())
}

/// The summary's links, hours, minutes and bot reasons from `events`.
struct NaiveSeries {
    links: Vec<LinkStats>,
    hours: Vec<HourStats>,
    minutes: Vec<HourStats>,
    bot_reasons: BTreeMap<String, BTreeMap<String, u64>>,
}

impl NaiveSeries {
    fn check(&self, s: &MailingSummary) -> anyhow::Result<()> {
        let counts = |links: &[LinkStats]| -> Vec<_> {
            links.iter().map(|l| (l.position, l.human, l.bot)).collect()
        };
        anyhow::ensure!(
            counts(&s.links) == counts(&self.links),
            "links: summary {:?}, brute force {:?}",
            counts(&s.links),
            counts(&self.links)
        );
        anyhow::ensure!(s.hours == self.hours, "hours differ from the brute force");
        anyhow::ensure!(
            s.minutes == self.minutes,
            "minutes differ from the brute force ({} against {})",
            s.minutes.len(),
            self.minutes.len()
        );
        anyhow::ensure!(
            s.bot_reasons == self.bot_reasons,
            "bot reasons: summary {:?}, brute force {:?}",
            s.bot_reasons,
            self.bot_reasons
        );
        Ok(())
    }
}

/// The totals and unique letters per kind and bot flag (as `naive` in
/// bench_stats.rs, without its links and hours: [`naive_series`] reads them).
async fn naive_totals(pool: &MySqlPool, mailing: &str, scope: Scope) -> anyhow::Result<Naive> {
    let scope = scope.sql();
    Ok(sqlx::query_as(&format!(
        "SELECT CAST(kind AS CHAR), CAST(bot <> 0 AND kind <> 'unsubscribe' AS SIGNED), COUNT(*), \
           COUNT(DISTINCT letter_id) FROM events \
         WHERE mailing_id = ? AND {REGULAR} AND {scope} GROUP BY 1, 2 ORDER BY 1, 2"
    ))
    .bind(mailing)
    .fetch_all(pool)
    .await?)
}

/// The events the rollup has counted: ids up to its watermark.
#[derive(Clone, Copy)]
struct Scope(u64);

impl Scope {
    fn sql(self) -> String {
        format!("id <= {}", self.0)
    }
}

/// A mailing's own events (not late ones), as the rollup counts them.
const REGULAR: &str = "COALESCE(link_id, 1) <> 0";

async fn naive_series(
    pool: &MySqlPool,
    mailing: &str,
    scope: Scope,
) -> anyhow::Result<NaiveSeries> {
    let scope = scope.sql();
    let links: Vec<(u32, i64, i64, i64)> = sqlx::query_as(&format!(
        "SELECT position, CAST(bot <> 0 AS SIGNED), COUNT(*), COUNT(DISTINCT letter_id) FROM events \
         WHERE mailing_id = ? AND kind = 'click' AND position > 0 AND {REGULAR} AND {scope} \
         GROUP BY 1, 2 ORDER BY 1"
    ))
    .bind(mailing)
    .fetch_all(pool)
    .await?;
    let mut by_position: BTreeMap<u32, LinkStats> = BTreeMap::new();
    for (position, bot, total, unique) in links {
        let link = by_position.entry(position).or_insert_with(|| LinkStats {
            position,
            ..LinkStats::default()
        });
        let counts = if bot != 0 {
            &mut link.bot
        } else {
            &mut link.human
        };
        counts.total = total as u64;
        counts.unique = unique as u64;
    }
    let scope = &scope;
    let series = |format: &'static str| async move {
        let rows: Vec<(chrono::NaiveDateTime, String, i64, i64)> = sqlx::query_as(&format!(
            "SELECT CAST(DATE_FORMAT(occurred_at, '{format}') AS DATETIME), CAST(kind AS CHAR), \
               CAST(bot <> 0 AS SIGNED), COUNT(*) FROM events \
             WHERE mailing_id = ? AND kind IN ('open', 'click') AND {REGULAR} AND {scope} \
             GROUP BY 1, 2, 3"
        ))
        .bind(mailing)
        .fetch_all(pool)
        .await?;
        let mut out: BTreeMap<chrono::NaiveDateTime, HourStats> = BTreeMap::new();
        for (hour, kind, bot, n) in rows {
            let h = out.entry(hour).or_insert_with(|| HourStats {
                hour,
                ..HourStats::default()
            });
            let n = n as u64;
            match (kind.as_str(), bot != 0) {
                ("open", false) => h.opens += n,
                ("open", true) => h.bot_opens += n,
                ("click", false) => h.clicks += n,
                _ => h.bot_clicks += n,
            }
        }
        Ok::<_, sqlx::Error>(out.into_values().collect::<Vec<_>>())
    };
    let hours = series("%Y-%m-%d %H:00:00").await?;
    let minutes = series("%Y-%m-%d %H:%i:00").await?;
    let reasons: Vec<(String, String, i64)> = sqlx::query_as(&format!(
        "SELECT CAST(kind AS CHAR), COALESCE(NULLIF(bot_reason, ''), 'unknown'), COUNT(*) FROM events \
         WHERE mailing_id = ? AND bot <> 0 AND {REGULAR} AND {scope} GROUP BY 1, 2"
    ))
    .bind(mailing)
    .fetch_all(pool)
    .await?;
    let mut bot_reasons: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (kind, reason, n) in reasons {
        bot_reasons
            .entry(kind)
            .or_default()
            .insert(reason, n as u64);
    }
    Ok(NaiveSeries {
        links: by_position.into_values().collect(),
        hours,
        minutes,
        bot_reasons,
    })
}

/// (dimension, value, kind, bot) -> events.
type Counts = BTreeMap<(String, String, String, bool), u64>;

/// The breakdowns by brute force: the opens and clicks of one mailing (or
/// of all) grouped by user agent, address domain and country in one pass
/// over `events`; the user agents classified and the domains' providers
/// looked up here, not read from `user_agent_classes`.
async fn naive_breakdowns(
    pool: &MySqlPool,
    mailing: Option<&str>,
    scope: Scope,
) -> anyhow::Result<Counts> {
    type Row = (
        String,
        i64,
        Option<String>,
        Option<String>,
        Option<String>,
        i64,
    );
    let sql = format!(
        "SELECT CAST(kind AS CHAR), CAST(bot <> 0 AS SIGNED), user_agent, \
           IF(email LIKE '%@%', LOWER(SUBSTRING_INDEX(email, '@', -1)), NULL), country, COUNT(*) \
         FROM events WHERE {} AND kind IN ('open', 'click') AND {REGULAR} AND {} \
         GROUP BY 1, 2, 3, 4, 5",
        if mailing.is_some() {
            "mailing_id = ?"
        } else {
            "mailing_id IS NOT NULL"
        },
        scope.sql()
    );
    let mut query = sqlx::query_as::<_, Row>(&sql);
    if let Some(id) = mailing {
        query = query.bind(id);
    }
    let rows = query.fetch_all(pool).await?;
    let classifier = Classifier::default();
    let mut classes = BTreeMap::new();
    let mut out = Counts::new();
    for (kind, bot, agent, domain, country, n) in rows {
        let class = classes
            .entry(agent.clone())
            .or_insert_with(|| classifier.classify(agent.as_deref()));
        let provider = match &domain {
            Some(d) => mailbox_provider(&format!("x@{d}")),
            None => "unknown",
        };
        let values = [
            ("client", class.client.clone()),
            ("client_type", class.client_type.as_str().to_owned()),
            ("os", class.os.clone()),
            ("device", class.device.as_str().to_owned()),
            ("provider", provider.to_owned()),
            ("country", country.unwrap_or_else(|| "unknown".to_owned())),
        ];
        for (dimension, value) in values {
            *out.entry((dimension.to_owned(), value, kind.clone(), bot != 0))
                .or_default() += n as u64;
        }
    }
    Ok(out)
}

fn check_breakdowns(
    what: &str,
    read: &breakdowns::Breakdowns,
    brute: &Counts,
) -> anyhow::Result<()> {
    let mut rolled = Counts::new();
    for (kind, side) in [("open", &read.opens), ("click", &read.clicks)] {
        for (dimension, shares) in side {
            for share in shares {
                for (bot, n) in [(false, share.n), (true, share.bots)] {
                    if n > 0 {
                        rolled.insert(
                            (dimension.clone(), share.value.clone(), kind.to_owned(), bot),
                            n,
                        );
                    }
                }
            }
        }
    }
    anyhow::ensure!(
        &rolled == brute,
        "{what}: rollup {rolled:?}\nbrute force {brute:?}"
    );
    let groups = |d: &str| rolled.keys().filter(|k| k.0 == d && k.2 == "open").count();
    println!(
        "{what}: {} figures; opens' values: {}",
        rolled.len(),
        breakdowns::DIMENSIONS
            .iter()
            .map(|d| format!("{d} {}", groups(d)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// The page and the endpoints through the real server on a loopback port.
async fn over_http(
    args: &Args,
    pool: &MySqlPool,
    mailing_bd: &breakdowns::Breakdowns,
    page_naive: Duration,
    naive_mailing_bd: Duration,
    naive_overall_bd: Duration,
) -> anyhow::Result<()> {
    let journal = tempfile::tempdir()?;
    let live = match &args.redis {
        Some(url) => Some(linktrack::live::Live::new(url, "lt_bench_stats:")?),
        None => None,
    };
    let settings = AppSettings {
        api_token: Some(TOKEN.to_owned()),
        live,
        ..AppSettings::new(pool.clone(), JournalSettings::new(journal.path()))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let app = App::build(settings, listener).await?;
    let base = format!("http://{}", app.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run(async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let get = |path: String| {
        let client = client.clone();
        let url = format!("{base}{path}");
        async move {
            let response = client.get(&url).bearer_auth(TOKEN).send().await?;
            let status = response.status();
            let body = response.text().await?;
            anyhow::ensure!(status.is_success(), "GET {url}: {status}: {body}");
            Ok(body)
        }
    };
    let runs = args.runs;
    let slow_runs = args.naive_runs.max(1);
    let (page_t, page) = timed(runs, || get(format!("/mailings/{MAILING}"))).await?;
    anyhow::ensure!(
        page.contains("Article 3") && page.contains("Mail client"),
        "the page lacks its links' names or its breakdowns"
    );
    let (stats_t, _) = timed(runs, || get(format!("/api/mailings/{MAILING}/stats"))).await?;
    let (bd_t, body) = timed(runs, || get(format!("/api/mailings/{MAILING}/breakdowns"))).await?;
    let answered: serde_json::Value = serde_json::from_str(&body)?;
    let mut expected = serde_json::to_value(mailing_bd)?;
    expected["mailing_id"] = serde_json::Value::from(MAILING);
    anyhow::ensure!(
        answered == expected,
        "the breakdowns endpoint answers what the store read"
    );
    let (overall_t, _) = timed(runs, || get("/api/breakdowns".to_owned())).await?;
    row(
        "HTTP GET /mailings/bench-0 (page)",
        page_t,
        runs,
        Some((page_naive, slow_runs)),
    );
    row("HTTP GET …/bench-0/stats", stats_t, runs, None);
    row(
        "HTTP GET …/bench-0/breakdowns",
        bd_t,
        runs,
        Some((naive_mailing_bd, slow_runs)),
    );
    row(
        "HTTP GET /api/breakdowns",
        overall_t,
        runs,
        Some((naive_overall_bd, slow_runs)),
    );
    let _ = stop.send(());
    server.await??;
    Ok(())
}
