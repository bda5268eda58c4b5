//! Benchmark of the letter builder and of the `links` insert path.
//!
//! ```sh
//! cargo run --release --example bench_build                      # full run (~15 min: prefills 20M rows)
//! cargo run --release --example bench_build -- --prefill 2000000 # quicker, smaller index
//! ```
//!
//! Every figure is a ratio against a baseline measured in the same run,
//! because the machines are shared and noisy:
//!
//! 0. **CPU side**: letters/s composing the same letters with no database
//!    and no delivery (`build::Composer`, on every core, each letter's JSON
//!    line written to a file), filled in from the mailing's plan against
//!    personalised and rewritten letter by letter (`--letter-by-letter`),
//!    in alternating rounds; the best round of each.
//! 1. **Builder**: letters/s and link rows/s building a 50 KB letter with 20
//!    links for `--letters` recipients, end to end (read, personalise,
//!    rewrite, store, write), for both paths (planned, letter by letter).
//!    Baseline: `LOAD DATA LOCAL INFILE` of the very rows the builder
//!    stored, into an empty copy of the table (the ceiling).
//! 2. **Index growth**: batched 1,000-row inserts into a day's partition that
//!    already holds `--prefill` rows, divided by the same inserts into an
//!    empty table, for UUIDv7 tokens (time-ordered leading bits) and for fully
//!    random 128-bit tokens (the layout seed 001 started from).
//!
//! 3. **Delivery** (`--smtp-sink`): the same build delivering every letter
//!    (a small creative of about 5 KB and a large one of about 48 KB:
//!    `--smtp-letters`)
//!    over SMTP (`--smtp-connections`, default 4) to Postfix's `smtp-sink`
//!    on a free loopback port, against the same build writing files only;
//!    outcomes recorded through the delivery log (what `linktrack build`
//!    does) and, for comparison, by a commit before each connection's next
//!    letter (`--smtp-ledger`). All are run in alternating rounds
//!    (`--smtp-rounds`) on fresh databases and the best of each is compared.
//!
//! Needs the `mysql` client (for LOAD DATA LOCAL) and a server with
//! `local_infile=ON`. Each run uses fresh `lt_bench_*` databases and drops them.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

#[path = "support/fresh_db.rs"]
mod fresh_db;
#[path = "support/mysql_client.rs"]
mod mysql_client;
#[path = "support/process_cpu.rs"]
mod process_cpu;
use fresh_db::fresh_db;
use process_cpu::{mariadbd_stat, ProcessCpu};

use chrono::{DateTime, NaiveTime, Utc};
use clap::Parser;
use linktrack::builder::{self, BuildOptions, Output};
use linktrack::delivery::smtp::SmtpSettings;
use linktrack::store::{self, RowFormat};
use linktrack::token::Token;
use rand::{Rng, RngExt};
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The binary's allocator (src/main.rs), so the builder here allocates as
/// `linktrack build` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Args {
    /// MySQL server, without a database.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    server: String,
    /// Letters to build in part 1.
    #[arg(long, default_value_t = 20_000)]
    letters: usize,
    /// Rows already in the day's partition for the UUIDv7 layout.
    #[arg(long, default_value_t = 20_000_000)]
    prefill: u64,
    /// Rows already in the day's partition for the random layout (random
    /// inserts into an index larger than the buffer pool are very slow).
    #[arg(long, default_value_t = 3_000_000)]
    prefill_random: u64,
    /// Rows inserted for each measured rate.
    #[arg(long, default_value_t = 200_000)]
    measure: u64,
    /// Skip part 2.
    #[arg(long)]
    skip_index: bool,
    /// Row formats part 1 measures, one after the other in the same run
    /// (comma-separated: dynamic, compressed, page-compressed).
    #[arg(long, value_delimiter = ',', default_value = "compressed")]
    formats: Vec<RowFormat>,
    /// For page-compressed: the server-wide `innodb_compression_algorithm`
    /// values to measure (each one set for its run, then restored; lz4
    /// needs Debian's mariadb-plugin-provider-lz4 loaded).
    #[arg(long, value_delimiter = ',', default_value = "zlib")]
    page_algorithms: Vec<String>,
    /// Measure SMTP delivery to Postfix's `smtp-sink` (part 3) instead of
    /// parts 1 and 2.
    #[arg(long)]
    smtp_sink: bool,
    /// Connections to the sink in part 3.
    #[arg(long, default_value_t = 4)]
    smtp_connections: u32,
    /// Alternating rounds (files only, then SMTP) in part 3.
    #[arg(long, default_value_t = 2)]
    smtp_rounds: usize,
    /// The creatives part 3 delivers, one after the other: `small` (a
    /// message of about 5 KB: most newsletters) and `large` (about 48 KB).
    #[arg(long, value_delimiter = ',', default_value = "small,large")]
    smtp_letters: Vec<LetterSize>,
    /// How part 3 records each outcome, each measured in the same rounds:
    /// `log` (the delivery log, what `linktrack build` does) and `commit`
    /// (a database commit before each connection's next letter).
    #[arg(long, value_delimiter = ',', default_value = "log,commit")]
    smtp_ledger: Vec<LedgerMode>,
    /// Alternating rounds of part 0 (planned, then letter by letter).
    #[arg(long, default_value_t = 3)]
    cpu_rounds: usize,
    /// Stop after part 0 (no database needed).
    #[arg(long)]
    cpu_only: bool,
    /// Parts 0 and 1 run only the planned path (for a profiler: `valgrind
    /// --tool=callgrind … --cpu-only --planned-only`; for an A/B of the
    /// builder with the database, without the letter-by-letter runs).
    #[arg(long)]
    planned_only: bool,
    /// Letters per batch (`linktrack build --batch-size`): a batch's rows
    /// are stored while the next is composed.
    #[arg(long, default_value_t = 1000)]
    batch_size: usize,
}

/// How part 3's delivery records outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LedgerMode {
    Log,
    Commit,
}

/// A creative of part 3.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LetterSize {
    Small,
    Large,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    println!(
        "# linktrack bench_build ({} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    bench_cpu_side(&args, dir.path())?;
    if args.cpu_only {
        return Ok(());
    }
    if args.smtp_sink {
        return bench_delivery(&args, dir.path()).await;
    }
    let mut results = Vec::new();
    for format in &args.formats {
        if *format != RowFormat::PageCompressed {
            for &letter_by_letter in paths(&args) {
                results
                    .push(bench_builder(&args, dir.path(), *format, None, letter_by_letter).await?);
            }
            continue;
        }
        for algorithm in &args.page_algorithms {
            let admin = MySqlPool::connect(&args.server).await?;
            let previous: String =
                sqlx::query_scalar("SELECT @@GLOBAL.innodb_compression_algorithm")
                    .fetch_one(&admin)
                    .await?;
            sqlx::query(&format!(
                "SET GLOBAL innodb_compression_algorithm = '{algorithm}'"
            ))
            .execute(&admin)
            .await
            .map_err(|e| {
                anyhow::anyhow!("algorithm {algorithm} (is its provider plugin loaded?): {e}")
            })?;
            let mut result = Ok(());
            for &letter_by_letter in paths(&args) {
                match bench_builder(
                    &args,
                    dir.path(),
                    *format,
                    Some(algorithm),
                    letter_by_letter,
                )
                .await
                {
                    Ok(figures) => results.push(figures),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            sqlx::query(&format!(
                "SET GLOBAL innodb_compression_algorithm = '{previous}'"
            ))
            .execute(&admin)
            .await?;
            result?;
        }
    }
    print_format_table(&results);
    if !args.skip_index {
        for (layout, prefill) in [
            (Layout::UuidV7, args.prefill),
            (Layout::Random, args.prefill_random),
        ] {
            bench_index_growth(&args, dir.path(), layout, prefill).await?;
        }
    }
    Ok(())
}

/// The paths part 1 measures: planned, then letter by letter unless
/// `--planned-only`.
fn paths(args: &Args) -> &'static [bool] {
    if args.planned_only {
        &[false]
    } else {
        &[false, true]
    }
}

async fn drop_db(server: &str, name: &str) -> anyhow::Result<()> {
    let admin = MySqlPool::connect(server).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS `{name}`"))
        .execute(&admin)
        .await?;
    Ok(())
}

/// A ~50 KB newsletter with 20 tracked links and 2 images.
/// A small newsletter: a greeting, five links, a few short paragraphs;
/// its message is about 5 KB (most newsletters are this size, and at this
/// size the SMTP hand-off's round trips, not its bytes, set the pace).
fn five_kb_letter() -> String {
    let mut html = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Bench</title></head>\n<body>\n<h1>Hello {{ first_name }},</h1>\n",
    );
    for n in 1..=5 {
        html.push_str(&format!(
            "<p><a href=\"https://news.example.com/articles/{n}?utm_source=newsletter&amp;utm_campaign=bench\">Article {n}</a>: \
             a short paragraph about this week's article number {n}, long enough to wrap once or twice in the text part; \
             a second sentence says what the reader will find there and why it matters this week.</p>\n"
        ));
    }
    html.push_str("<a href=\"{{ unsubscribe_url }}\">Unsubscribe</a>\n</body></html>\n");
    html
}

fn fifty_kb_letter() -> String {
    let mut html = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Bench</title></head>\n<body>\n<h1>Hello {{ first_name }},</h1>\n",
    );
    html.push_str("<img src=\"https://cdn.example.com/logo.png\" width=\"180\" alt=\"logo\">\n");
    for n in 1..=20 {
        html.push_str(&format!(
            "<table role=\"presentation\"><tr><td style=\"padding:12px;font-family:Helvetica,Arial,sans-serif\">\n\
             <a href=\"https://news.example.com/articles/{n}?utm_source=newsletter&amp;utm_medium=email&amp;utm_campaign=bench\">Article {n}</a>\n<p>"
        ));
        while html.len() < n * 2_450 {
            html.push_str(
                "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. ",
            );
        }
        html.push_str("</p></td></tr></table>\n");
    }
    html.push_str("<img src=\"https://cdn.example.com/footer.png\" alt=\"\">\n<a href=\"{{ unsubscribe_url }}\">Unsubscribe</a>\n</body></html>\n");
    html
}

/// One format's figures from part 1.
struct FormatResult {
    format: RowFormat,
    letter_by_letter: bool,
    algorithm: Option<String>,
    letters_per_second: f64,
    rows_per_second: f64,
    load_rows_per_second: f64,
    bytes_per_row: f64,
}

fn print_format_table(results: &[FormatResult]) {
    let compressed = results
        .iter()
        .find(|r| r.format == RowFormat::Compressed)
        .map(|r| r.bytes_per_row);
    println!("\n## row formats (same letters, same run)");
    println!("| format | path | LOAD DATA rows/s | builder rows/s | letters/s | builder / LOAD DATA | allocated bytes/row | bytes vs compressed |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in results {
        println!(
            "| {}{} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} | {} |",
            r.format.name(),
            r.algorithm
                .as_deref()
                .map_or(String::new(), |a| format!(" ({a})")),
            path_name(r.letter_by_letter),
            r.load_rows_per_second,
            r.rows_per_second,
            r.letters_per_second,
            r.rows_per_second / r.load_rows_per_second,
            r.bytes_per_row,
            compressed.map_or("–".to_owned(), |c| format!("{:.2}", r.bytes_per_row / c)),
        );
    }
}

/// Bytes the server's files of `table` take on disk (allocated, not
/// apparent: page compression leaves holes), after its dirty pages are
/// written out (FLUSH TABLES … FOR EXPORT waits for that).
async fn allocated_bytes(pool: &MySqlPool, database: &str, table: &str) -> anyhow::Result<u64> {
    let mut conn = pool.acquire().await?;
    sqlx::query(&format!("FLUSH TABLES {table} FOR EXPORT"))
        .execute(&mut *conn)
        .await?;
    sqlx::query("UNLOCK TABLES").execute(&mut *conn).await?;
    let bytes: Option<u64> = sqlx::query_scalar(
        "SELECT CAST(SUM(ALLOCATED_SIZE) AS UNSIGNED) FROM information_schema.INNODB_SYS_TABLESPACES \
         WHERE NAME LIKE ?",
    )
    .bind(format!("{database}/{table}#P#%"))
    .fetch_one(&mut *conn)
    .await?;
    Ok(bytes.unwrap_or(0))
}

fn path_name(letter_by_letter: bool) -> &'static str {
    if letter_by_letter {
        "letter by letter"
    } else {
        "planned"
    }
}

/// Part 0: the builder's CPU side alone, both paths, alternating rounds.
fn bench_cpu_side(args: &Args, dir: &Path) -> anyhow::Result<()> {
    let html = fifty_kb_letter();
    write_mailing(dir, &html)?;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut best = [0f64; 2];
    for round in 1..=args.cpu_rounds {
        let paths = if args.planned_only {
            &[false][..]
        } else {
            &[false, true][..]
        };
        for (slot, &letter_by_letter) in paths.iter().enumerate() {
            let composer = builder::Composer::load(
                &dir.join("mailing.json"),
                "https://t.example.com",
                letter_by_letter,
            )?;
            anyhow::ensure!(
                composer.is_planned() != letter_by_letter,
                "the bench letter must be planned: {:?}",
                composer.plan_reason()
            );
            let rate = compose_all(&composer, args.letters, workers, &dir.join("cpu.jsonl"))?;
            best[slot] = best[slot].max(rate);
            println!(
                "round {round}: {:<16} {rate:>8.0} letters/s",
                path_name(letter_by_letter)
            );
        }
    }
    println!(
        "\n## 0. CPU side: {} letters of {} KB with 20 links, {workers} threads, no database",
        args.letters,
        html.len() / 1024
    );
    println!(
        "letter by letter     {:>10.0} letters/s   (the baseline: today's path)",
        best[1]
    );
    println!("planned              {:>10.0} letters/s", best[0]);
    println!(
        "ratio planned/old    {:>10.2}   (aim >= 3)",
        best[0] / best[1]
    );
    Ok(())
}

/// Composes `letters` letters on `workers` threads, each writing its JSON
/// lines to its own file; returns letters/s.
fn compose_all(
    composer: &builder::Composer,
    letters: usize,
    workers: usize,
    out: &Path,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let per_worker = letters.div_ceil(workers);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let path = out.with_extension(format!("{worker}.jsonl"));
                scope.spawn(move || -> anyhow::Result<()> {
                    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
                    let first = worker * per_worker;
                    for n in first..(first + per_worker).min(letters) {
                        let fields = serde_json::json!({"email": format!("reader{n}@example.com"), "first_name": format!("Reader {n}")});
                        let serde_json::Value::Object(fields) = fields else { anyhow::bail!("fields are an object") };
                        let line = composer.letter_line(fields, n as u64 + 1).map_err(anyhow::Error::msg)?;
                        writeln!(file, "{line}")?;
                    }
                    file.flush()?;
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle
                .join()
                .map_err(|_| anyhow::anyhow!("a composing thread panicked"))??;
        }
        Ok(())
    })?;
    Ok(letters as f64 / started.elapsed().as_secs_f64())
}

fn write_mailing(dir: &Path, html: &str) -> anyhow::Result<()> {
    let mailing = serde_json::json!({"mailing_id": "bench", "subject": "Hi {{ first_name }}", "from": "b@example.com", "html": html});
    std::fs::write(dir.join("mailing.json"), mailing.to_string())?;
    Ok(())
}

async fn bench_builder(
    args: &Args,
    dir: &Path,
    format: RowFormat,
    algorithm: Option<&str>,
    letter_by_letter: bool,
) -> anyhow::Result<FormatResult> {
    let name = "lt_bench_build";
    let (pool, _) = fresh_db(&args.server, name).await?;
    let options = store::RowFormatOptions::new(format);
    for line in store::set_row_format(&pool, &options).await? {
        println!("{line}");
    }
    let html = fifty_kb_letter();
    // Where the time goes: the builder's CPU and MariaDB's per link row,
    // for the build and for LOAD DATA of the same rows.
    let mariadbd = mariadbd_stat(&pool).await;
    let database_cpu = || -> anyhow::Result<f64> {
        Ok(match &mariadbd {
            Some(stat) => ProcessCpu::read(stat)?.own,
            None => 0.0,
        })
    };
    let (builder_before, database_before) = (ProcessCpu::this()?.own, database_cpu()?);
    let summary = run_builder(args, dir, &pool, &html, None, letter_by_letter, None).await?;
    let (builder_after, database_after) = (ProcessCpu::this()?.own, database_cpu()?);
    let rows_per_second = summary.links_stored as f64 / summary.seconds;
    let per_row = |seconds: f64, rows: u64| seconds * 1e6 / rows.max(1) as f64;
    println!(
        "\n## 1. builder ({}, {}): {} letters of {} KB with 20 links",
        format.name(),
        path_name(letter_by_letter),
        summary.letters_built,
        html.len() / 1024
    );
    println!(
        "letters/s            {:>10.0}",
        summary.letters_per_second()
    );
    println!("link rows/s          {:>10.0}", rows_per_second);

    // The ceiling: LOAD DATA of the same rows into an empty copy of the table.
    let tsv = dir.join("links.tsv");
    let rows = dump_links(&pool, &tsv).await?;
    sqlx::query("CREATE TABLE links_copy LIKE links")
        .execute(&pool)
        .await?;
    let load_database_before = database_cpu()?;
    let load_seconds = mysql_client::load_links_tsv(name, &tsv, "links_copy")?;
    let load_database = database_cpu()? - load_database_before;
    let ceiling = rows as f64 / load_seconds;
    println!(
        "LOAD DATA rows/s     {:>10.0}   (the ceiling, same {rows} rows)",
        ceiling
    );
    println!(
        "CPU µs per link row  builder {:.1}, mariadbd {:.1}; LOAD DATA: mariadbd {:.1}",
        per_row(builder_after - builder_before, summary.links_stored),
        per_row(database_after - database_before, summary.links_stored),
        per_row(load_database, rows),
    );
    println!(
        "ratio builder/LOAD   {:>10.2}   (aim >= 0.8)",
        rows_per_second / ceiling
    );
    let bytes = allocated_bytes(&pool, name, "links_copy").await?;
    let bytes_per_row = bytes as f64 / rows.max(1) as f64;
    println!("allocated bytes/row  {bytes_per_row:>10.0}   ({bytes} bytes for {rows} rows)");
    let result = FormatResult {
        format,
        letter_by_letter,
        algorithm: algorithm.map(str::to_owned),
        letters_per_second: summary.letters_per_second(),
        rows_per_second,
        load_rows_per_second: ceiling,
        bytes_per_row,
    };
    pool.close().await;
    drop_db(&args.server, name).await?;
    Ok(result)
}

/// Build `--letters` letters of `html` into `pool`, delivering them over
/// SMTP when `smtp` is given.
async fn run_builder(
    args: &Args,
    dir: &Path,
    pool: &MySqlPool,
    html: &str,
    smtp: Option<SmtpSettings>,
    letter_by_letter: bool,
    delivery_log: Option<PathBuf>,
) -> anyhow::Result<builder::Summary> {
    write_mailing(dir, html)?;
    let mut recipients =
        std::io::BufWriter::new(std::fs::File::create(dir.join("recipients.jsonl"))?);
    for n in 0..args.letters {
        writeln!(
            recipients,
            "{{\"email\":\"reader{n}@example.com\",\"first_name\":\"Reader {n}\"}}"
        )?;
    }
    recipients.flush()?;
    let options = BuildOptions {
        mailing: dir.join("mailing.json"),
        recipients: dir.join("recipients.jsonl"),
        out: Output::File(dir.join("letters.jsonl")),
        rejects: dir.join("rejects.jsonl"),
        base_url: "https://t.example.com".into(),
        batch_size: args.batch_size,
        workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
        id_block: 10_000,
        progress: false,
        smtp,
        pools: None,
        return_path: None,
        delivery_log,
        bounce_domain: None,
        summary: None,
        max_letter_bytes: builder::DEFAULT_MAX_LETTER_BYTES,
        secret: None,
        new_secret: false,
        columns: Vec::new(),
        letter_by_letter,
    };
    Ok(builder::run(pool, &options).await?)
}

/// Part 3: letters/s delivering over SMTP to `smtp-sink` against the same
/// build writing files only, in alternating rounds on fresh databases, for
/// each letter size of `--smtp-letters`.
async fn bench_delivery(args: &Args, dir: &Path) -> anyhow::Result<()> {
    let sink = SmtpSink::start()?;
    for size in &args.smtp_letters {
        let html = match size {
            LetterSize::Small => five_kb_letter(),
            LetterSize::Large => fifty_kb_letter(),
        };
        bench_delivery_of(args, dir, &sink, &html).await?;
    }
    Ok(())
}

/// Part 3 for one creative.
async fn bench_delivery_of(
    args: &Args,
    dir: &Path,
    sink: &SmtpSink,
    html: &str,
) -> anyhow::Result<()> {
    let name = "lt_bench_delivery";
    // Files only first (the baseline), then each way of recording outcomes.
    let modes: Vec<Option<LedgerMode>> = std::iter::once(None)
        .chain(args.smtp_ledger.iter().copied().map(Some))
        .collect();
    let mut best = vec![0f64; modes.len()];
    // CPU milliseconds per letter, per mode and round: [builder, sink, mariadbd].
    let mut cpu: Vec<Vec<[f64; 3]>> = vec![Vec::new(); modes.len()];
    let mariadbd = {
        let admin = MySqlPool::connect(&args.server).await?;
        mariadbd_stat(&admin).await
    };
    let machine_cpu = |sink: &SmtpSink| -> anyhow::Result<[f64; 3]> {
        let database = match &mariadbd {
            Some(stat) => ProcessCpu::read(stat)?.own,
            None => 0.0,
        };
        Ok([ProcessCpu::this()?.own, sink.cpu()?, database])
    };
    let mut message_bytes = 0;
    for round in 1..=args.smtp_rounds {
        for (index, mode) in modes.iter().enumerate() {
            let (pool, _) = fresh_db(&args.server, name).await?;
            let before = machine_cpu(sink)?;
            let settings = mode.map(|_| SmtpSettings {
                url: sink.url(),
                connections: args.smtp_connections,
                messages_per_connection: None,
                retries: 5,
                backoff: std::time::Duration::from_millis(200),
            });
            let log = (*mode == Some(LedgerMode::Log)).then(|| dir.join("deliveries.jsonl"));
            let summary = run_builder(args, dir, &pool, html, settings, false, log).await?;
            let after = machine_cpu(sink)?;
            let letters = summary.letters_built.max(1) as f64;
            cpu[index].push([0, 1, 2].map(|i| (after[i] - before[i]) * 1000.0 / letters));
            let rate = summary.letters_per_second();
            if mode.is_some() {
                anyhow::ensure!(
                    summary.delivered == summary.letters_built,
                    "the sink took {} of {} letters",
                    summary.delivered,
                    summary.letters_built
                );
            } else {
                message_bytes = first_message_bytes(&dir.join("letters.jsonl"))?;
            }
            best[index] = best[index].max(rate);
            println!(
                "round {round}: {:<22} {rate:>8.0} letters/s",
                mode_name(*mode)
            );
            pool.close().await;
            drop_db(&args.server, name).await?;
        }
    }
    println!(
        "\n## 3. delivery: {} letters, messages of {:.1} KB, {} SMTP connections to smtp-sink",
        args.letters,
        message_bytes as f64 / 1024.0,
        args.smtp_connections
    );
    let files_only = best[0];
    println!(
        "files only letters/s          {files_only:>10.0}   (the baseline, best of {} rounds)",
        args.smtp_rounds
    );
    for (index, mode) in modes.iter().enumerate().skip(1) {
        let rate = best[index];
        println!(
            "{:<22} msgs/s {rate:>8.0}   per connection {:>6.0}   ratio to files {:>5.2}   (aim >= 0.8)",
            mode_name(*mode),
            rate / f64::from(args.smtp_connections.max(1)),
            rate / files_only
        );
    }
    // On two shared cores the sink and the database take CPU the builder
    // would use; the builder's own CPU per letter is what holds when the
    // MTA has a machine of its own.
    let medians: Vec<[f64; 3]> = cpu
        .iter()
        .map(|rounds| {
            let mut rounds = rounds.clone();
            [0, 1, 2].map(|i| {
                rounds.sort_by(|a, b| a[i].total_cmp(&b[i]));
                rounds.get(rounds.len() / 2).map_or(0.0, |r| r[i])
            })
        })
        .collect();
    println!("\nCPU ms per letter (median of rounds)   builder   smtp-sink   mariadbd   builder CPU files/this");
    for (index, mode) in modes.iter().enumerate() {
        let [builder, sink, database] = medians[index];
        println!(
            "{:<34} {builder:>10.3}  {sink:>10.3}  {database:>9.3}  {:>10.2}",
            mode_name(*mode),
            medians[0][0] / builder
        );
    }
    Ok(())
}

/// How a part 3 mode is printed.
fn mode_name(mode: Option<LedgerMode>) -> &'static str {
    match mode {
        None => "files only",
        Some(LedgerMode::Log) => "SMTP, delivery log",
        Some(LedgerMode::Commit) => "SMTP, commit each",
    }
}

/// The size of the first letter's `message` in a letters file.
fn first_message_bytes(letters: &Path) -> anyhow::Result<usize> {
    let file = std::io::BufReader::new(std::fs::File::open(letters)?);
    let Some(line) = std::io::BufRead::lines(file).next() else {
        return Ok(0);
    };
    let letter: serde_json::Value = serde_json::from_str(&line?)?;
    Ok(letter["message"].as_str().map_or(0, str::len))
}

/// Postfix's `smtp-sink` on a free loopback port, discarding what it
/// receives; killed on drop.
struct SmtpSink {
    child: std::process::Child,
    port: u16,
}

impl SmtpSink {
    fn start() -> anyhow::Result<SmtpSink> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = std::process::Command::new("smtp-sink")
            .args(["-u", "root"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("256")
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("smtp-sink (Debian's postfix package): {e}"))?;
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "smtp-sink did not listen on {port}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(SmtpSink { child, port })
    }

    fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// CPU seconds the sink has used.
    fn cpu(&self) -> anyhow::Result<f64> {
        let stat = std::path::PathBuf::from(format!("/proc/{}/stat", self.child.id()));
        Ok(ProcessCpu::read(&stat)?.own)
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Write the `links` rows as TSV for LOAD DATA; returns the row count.
async fn dump_links(pool: &MySqlPool, path: &Path) -> anyhow::Result<u64> {
    type Row = (
        String,
        chrono::NaiveDate,
        String,
        String,
        u64,
        String,
        u32,
        String,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT HEX(uuid), inserted, CAST(kind AS CHAR), mailing_id, letter_id, email, position, url FROM links",
    )
    .fetch_all(pool)
    .await?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (uuid, inserted, kind, mailing, letter, email, position, url) in &rows {
        writeln!(
            out,
            "{uuid}\t{inserted}\t{kind}\t{mailing}\t{letter}\t{email}\t{position}\t{url}"
        )?;
    }
    out.flush()?;
    Ok(rows.len() as u64)
}

#[derive(Clone, Copy, Debug)]
enum Layout {
    UuidV7,
    Random,
}

impl Layout {
    fn token(self, at: DateTime<Utc>) -> [u8; 16] {
        match self {
            Layout::UuidV7 => *Token::at(at).as_bytes(),
            Layout::Random => {
                let mut bytes = [0u8; 16];
                rand::rng().fill_bytes(&mut bytes);
                bytes
            }
        }
    }
}

async fn bench_index_growth(
    args: &Args,
    dir: &Path,
    layout: Layout,
    prefill: u64,
) -> anyhow::Result<()> {
    let name = format!("lt_bench_{layout:?}").to_lowercase();
    let empty_name = format!("{name}_empty");
    let tsv = dir.join("prefill.tsv");
    write_prefill(&tsv, layout, prefill)?;
    let (pool, _) = fresh_db(&args.server, &name).await?;
    let load_seconds = mysql_client::load_links_tsv(&name, &tsv, "links")?;
    std::fs::remove_file(&tsv)?;

    // The empty-table rate is measured just before and just after the
    // prefilled one, so load from other processes hits both sides alike.
    let empty_before = rate_into_empty(args, &empty_name, layout).await?;
    let full_rate = timed_inserts(&pool, layout, args.measure).await?;
    let empty_after = rate_into_empty(args, &empty_name, layout).await?;
    let empty_rate = (empty_before + empty_after) / 2.0;

    println!(
        "\n## 2. index growth, {layout:?} tokens, {prefill} rows already in today's partition"
    );
    println!(
        "prefill LOAD DATA rows/s  {:>10.0}",
        prefill as f64 / load_seconds
    );
    println!("insert rows/s, empty      {:>10.0}   (mean of {empty_before:.0} before and {empty_after:.0} after)", empty_rate);
    println!("insert rows/s, prefilled  {:>10.0}", full_rate);
    println!(
        "ratio prefilled/empty     {:>10.2}   (aim >= 0.9 for UuidV7; random falls once the index outgrows the buffer pool)",
        full_rate / empty_rate
    );
    pool.close().await;
    drop_db(&args.server, &name).await
}

async fn rate_into_empty(args: &Args, name: &str, layout: Layout) -> anyhow::Result<f64> {
    let (pool, _) = fresh_db(&args.server, name).await?;
    let rate = timed_inserts(&pool, layout, args.measure).await?;
    pool.close().await;
    drop_db(&args.server, name).await?;
    Ok(rate)
}

/// Rows earlier today, in time order as a real day's inserts arrive.
fn write_prefill(path: &Path, layout: Layout, rows: u64) -> anyhow::Result<()> {
    let now = Utc::now();
    let midnight = now.date_naive().and_time(NaiveTime::MIN).and_utc();
    // Leave the last minute to the measured inserts.
    let span_ms = ((now - midnight).num_milliseconds() - 60_000).max(1) as u64;
    let day = now.date_naive();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut rng = rand::rng();
    for n in 0..rows {
        let at = midnight + chrono::Duration::milliseconds((n * span_ms / rows.max(1)) as i64);
        let uuid = hex(&layout.token(at));
        let letter = n / 20;
        writeln!(
            out,
            "{uuid}\t{day}\tclick\tprefill\t{letter}\treader{letter}@example.com\t{}\thttps://news.example.com/articles/{}?utm_source=newsletter",
            n % 20,
            rng.random_range(0..1000)
        )?;
    }
    out.flush()?;
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Insert `rows` rows in 1,000-row statements, tokens made now; rows/s.
async fn timed_inserts(pool: &MySqlPool, layout: Layout, rows: u64) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut done = 0;
    while done < rows {
        let batch = 1000.min(rows - done);
        let now = Utc::now();
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT INTO links (uuid, inserted, kind, mailing_id, letter_id, email, position, url) ",
        );
        query.push_values(0..batch, |mut b, i| {
            let n = done + i;
            b.push_bind(layout.token(now).to_vec())
                .push_bind(now.date_naive())
                .push_bind("click")
                .push_bind("measured")
                .push_bind(n / 20)
                .push_bind(format!("reader{}@example.com", n / 20))
                .push_bind((n % 20) as u32)
                .push_bind(format!(
                    "https://news.example.com/articles/{}?utm_source=newsletter",
                    n % 1000
                ));
        });
        query.build().execute(pool).await?;
        done += batch;
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}
