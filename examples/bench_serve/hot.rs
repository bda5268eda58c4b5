//! `--hot-letters N`: the rollup against the clicks a running `linktrack
//! serve` takes, on letters with many hits each (a viral mailing, a scanner
//! storm, a forwarded letter).
//!
//! Each measurement loads N letters × `--hot-links` links of one mailing
//! into a fresh database (today's partition), starts the `linktrack` binary
//! given by `--linktrack` as `serve` with its defaults except
//! `--rollup-every 1` and `--verdict-settle-secs` (10), and has wrk click
//! random links of them with `--connections` connections for `--seconds`.
//! Meanwhile and after, the rollup's watermark (`rollup_state.last_id`) is
//! read every 100 ms, until every event is rolled.
//!
//! Figures: the clicks taken per second (wrk's), and the rollup's pace:
//! the events rolled per second from the moment the first could be rolled
//! (the load's start + the settle time) to the moment the last was. A
//! rollup that keeps up finishes about a settle time after the load ends,
//! and its pace is the intake's (less its last tick and batch); one that
//! does not falls behind and finishes later. Beside them, CPU per rolled
//! event after the load (when the rollup is the only work left): the
//! server process's, MariaDB's whole process's and its statements'.
//!
//! Several `--linktrack` binaries (comma-separated) take turns round after
//! round: an A/B of two builds in one session.

use super::*;
use std::collections::HashMap;
use std::process::Stdio;
use std::time::Instant;

/// One measurement's figures.
#[derive(Debug, Clone, Default)]
pub(crate) struct HotFigure {
    pub(crate) clicks_per_second: f64,
    pub(crate) events: u64,
    pub(crate) rolled_per_second: f64,
    /// Every event rolled within `--hot-wait` of the load's end.
    pub(crate) finished: bool,
    /// Seconds from the load's end + settle until the last event was rolled.
    pub(crate) lag: f64,
    /// After the load, per event rolled then: the server process's CPU,
    /// the whole `mariadbd`'s, and its statements' (USER_STATISTICS).
    pub(crate) server_cpu_per_event: f64,
    pub(crate) mariadbd_cpu_per_event: f64,
    pub(crate) statements_cpu_per_event: f64,
    /// During the load, per click.
    pub(crate) server_cpu_per_click: f64,
    pub(crate) mariadbd_cpu_per_click: f64,
    pub(crate) bots: u64,
    /// After the load, per event rolled then: rows read and changed of each
    /// table MariaDB's `TABLE_STATISTICS` names (`userstat`), most first.
    pub(crate) rows: Vec<(String, f64, f64)>,
}

impl HotFigure {
    pub(crate) fn pace(&self) -> f64 {
        self.rolled_per_second / self.clicks_per_second
    }
}

/// The rounds: every binary once per round, in turn; then each one's medians.
pub(crate) async fn hot_rounds(args: &Args, letters: u64) -> anyhow::Result<()> {
    let binaries = linktrack_binaries(args)?;
    let dir = tempfile::tempdir()?;
    println!(
        "# bench_serve --hot-letters: {letters} letters × {} links, wrk -c{} random clicks for {} s, \
         serve --rollup-every 1 --verdict-settle-secs {}, {} rounds",
        args.hot_links, args.connections, args.seconds, args.settle_secs, args.rounds
    );
    let mut figures: Vec<Vec<HotFigure>> = vec![Vec::new(); binaries.len()];
    for round in 1..=args.rounds {
        for (binary, figures) in binaries.iter().zip(&mut figures) {
            let figure = hot_load(args, letters, binary, dir.path()).await?;
            println!(
                "round {round} {}: {:.0} clicks/s in, {} events ({:.0} a letter), rolled {:.0}/s, \
                 pace {:.2} of intake{}, last rolled {:.1} s after load end + settle; after the load \
                 per rolled event: server {:.1} µs, mariadbd {:.1} µs (statements {:.1}); during it \
                 per click: server {:.1} µs, mariadbd {:.1} µs; {} judged bots",
                binary.display(),
                figure.clicks_per_second,
                figure.events,
                figure.events as f64 / letters as f64,
                figure.rolled_per_second,
                figure.pace(),
                if figure.finished { "" } else { " (unfinished: what it rolled by then)" },
                figure.lag,
                figure.server_cpu_per_event * 1e6,
                figure.mariadbd_cpu_per_event * 1e6,
                figure.statements_cpu_per_event * 1e6,
                figure.server_cpu_per_click * 1e6,
                figure.mariadbd_cpu_per_click * 1e6,
                figure.bots,
            );
            let rows: Vec<String> = figure
                .rows
                .iter()
                .map(|(table, read, changed)| {
                    format!("{table} {read:.1} read, {changed:.1} changed")
                })
                .collect();
            println!(
                "  rows per rolled event after the load: {}",
                rows.join("; ")
            );
            figures.push(figure);
        }
    }
    println!("\nmedians of {} rounds", args.rounds);
    for (binary, figures) in binaries.iter().zip(&figures) {
        let median = |field: fn(&HotFigure) -> f64| {
            let mut values: Vec<f64> = figures.iter().map(field).collect();
            values.sort_by(f64::total_cmp);
            values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
        };
        println!(
            "{}: rollup pace / click intake {:.2} ({:.0} rolled/s against {:.0} clicks/s); \
             CPU per rolled event after the load: server {:.1} µs, mariadbd {:.1} µs",
            binary.display(),
            median(HotFigure::pace),
            median(|f| f.rolled_per_second),
            median(|f| f.clicks_per_second),
            median(|f| f.server_cpu_per_event) * 1e6,
            median(|f| f.mariadbd_cpu_per_event) * 1e6,
        );
    }
    Ok(())
}

/// `--linktrack`'s binaries; by default the `linktrack` built beside this
/// example (`target/release/linktrack`).
fn linktrack_binaries(args: &Args) -> anyhow::Result<Vec<PathBuf>> {
    if !args.linktrack.is_empty() {
        return Ok(args.linktrack.clone());
    }
    let exe = std::env::current_exe()?;
    let beside = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("linktrack"))
        .ok_or_else(|| anyhow::anyhow!("no directory above {}", exe.display()))?;
    anyhow::ensure!(
        beside.exists(),
        "{} is missing: cargo build --release --bin linktrack, or give --linktrack",
        beside.display()
    );
    Ok(vec![beside])
}

/// A fresh database with `letters` × `--hot-links` links of one mailing,
/// built an hour ago (clicks on them are not "too fast"); returns the tokens.
/// Its schema is `binary`'s own (`linktrack migrate`): an A/B of builds
/// whose migrations differ measures each on the tables it was made for.
async fn load_hot_links(
    args: &Args,
    letters: u64,
    binary: &Path,
    dir: &Path,
) -> anyhow::Result<Vec<Token>> {
    let admin = sqlx::MySqlPool::connect(&args.server).await?;
    let database = &args.database;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {database}"))
        .execute(&admin)
        .await?;
    admin.close().await;
    let url = format!("{}/{database}", args.server);
    let migrated = std::process::Command::new(binary)
        .arg("migrate")
        .env("DATABASE_URL", &url)
        .env_remove("LINKTRACK_SHARDS")
        .output()?;
    anyhow::ensure!(
        migrated.status.success(),
        "{} migrate: {}",
        binary.display(),
        String::from_utf8_lossy(&migrated.stderr)
    );
    let pool = store::connect(&url, &PoolSettings::default()).await?;
    let seal = store::link_templates::load_seal(&pool, None).await?;
    let today = Utc::now().date_naive();
    let policy = partitions::Policy {
        today,
        ahead_days: 2,
        keep_days: None,
    };
    partitions::run(&pool, &policy, &partitions::RunOptions::default()).await?;
    let tsv = dir.join("hot-links.tsv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tsv)?);
    let built =
        (Utc::now() - chrono::Duration::hours(1)).max(today.and_time(NaiveTime::MIN).and_utc());
    let mut tokens = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for letter in 1..=letters {
        for position in 1..=args.hot_links {
            // A letter's tokens differ in 19 random bits: draw again on a repeat.
            let token = loop {
                let token = seal.seal(built, Plaintext::issue(TokenKind::Click, 0, letter));
                if seen.insert(token.to_string()) {
                    break token;
                }
            };
            tokens.push(token);
            writeln!(
                out,
                "{token}\t{}\tclick\thot\t{letter}\treader{letter}@example.com\t{position}\t\
                 https://news.example.com/articles/{position}?utm_source=newsletter",
                token.date(),
            )?;
        }
    }
    out.flush()?;
    drop(out);
    mysql_client::load_links_tsv(database, &tsv, "links")?;
    sqlx::query("ANALYZE TABLE links").execute(&pool).await?;
    pool.close().await;
    Ok(tokens)
}

/// wrk's script: every request a random token of the file's.
fn write_random_script(dir: &Path, tokens: &[Token]) -> anyhow::Result<PathBuf> {
    let list = dir.join("hot-tokens.txt");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&list)?);
    for token in tokens {
        writeln!(out, "{token}")?;
    }
    out.flush()?;
    let path = dir.join("hot.lua");
    std::fs::write(
        &path,
        format!(
            r#"local tokens = {{}}
for line in io.lines("{}") do tokens[#tokens + 1] = line end
local threads = 0
function setup(thread) thread:set("seed", threads); threads = threads + 1 end
function init(args) math.randomseed(os.time() * 16 + seed) end
wrk.headers["User-Agent"] = "{BROWSER}"
function request()
  return wrk.format("GET", "/c/" .. tokens[math.random(#tokens)])
end"#,
            list.display()
        ),
    )?;
    Ok(path)
}

/// A `linktrack serve` child, stopped with SIGTERM when dropped.
struct ServeProcess {
    child: tokio::process::Child,
    stat: PathBuf,
}

impl ServeProcess {
    async fn start(
        args: &Args,
        binary: &Path,
        url: &str,
        journal: &Path,
        dir: &Path,
    ) -> anyhow::Result<(ServeProcess, SocketAddr)> {
        let port = |addr: std::io::Result<SocketAddr>| addr.map(|a| a.port());
        // Two free ports: bound, read, released, then given to serve.
        let (listen, admin) = {
            let a = std::net::TcpListener::bind("127.0.0.1:0")?;
            let b = std::net::TcpListener::bind("127.0.0.1:0")?;
            (port(a.local_addr())?, port(b.local_addr())?)
        };
        let log = std::fs::File::create(dir.join("serve.log"))?;
        let child = tokio::process::Command::new(binary)
            .arg("serve")
            .args(["--listen", &format!("127.0.0.1:{listen}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .args(["--rollup-every", "1"])
            .args(["--verdict-settle-secs", &args.settle_secs.to_string()])
            .arg("--journal")
            .arg(journal)
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "info,sqlx=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow::anyhow!("serve exited at once"))?;
        let addr: SocketAddr = format!("127.0.0.1:{listen}").parse()?;
        let started = Instant::now();
        loop {
            if let Ok(answer) = reqwest::get(format!("http://{addr}/healthz")).await {
                if answer.status().is_success() {
                    break;
                }
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(30),
                "serve did not answer /healthz in 30 s: see {}",
                dir.join("serve.log").display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let stat = PathBuf::from(format!("/proc/{pid}/stat"));
        Ok((ServeProcess { child, stat }, addr))
    }

    fn cpu(&self) -> anyhow::Result<f64> {
        Ok(ProcessCpu::read(&self.stat)?.own)
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            // The child this run started, by its own id.
            std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()?;
        }
        if tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// One measurement with `binary` (see the module docs).
async fn hot_load(
    args: &Args,
    letters: u64,
    binary: &Path,
    dir: &Path,
) -> anyhow::Result<HotFigure> {
    let tokens = load_hot_links(args, letters, binary, dir).await?;
    let script = write_random_script(dir, &tokens)?;
    let counter = ServerUser::create(&args.server, &args.database).await?;
    let journal = dir.join("hot-journal");
    let _ = std::fs::remove_dir_all(&journal);
    let (serve, addr) = ServeProcess::start(args, binary, &counter.url, &journal, dir).await?;
    let watch = sqlx::MySqlPool::connect(&format!("{}/{}", args.server, args.database)).await?;

    let (_, mariadbd_before, serve_before) =
        (counter.cpu().await?, counter.mariadbd_cpu()?, serve.cpu()?);
    let start = Instant::now();
    let load = {
        let args = args.clone();
        let script = script.clone();
        tokio::spawn(async move { wrk(&args, args.seconds, &script, addr).await })
    };
    let mut load = load;
    // (seconds since the load's start, watermark)
    let mut marks: Vec<(f64, u64)> = Vec::new();
    let mut loaded: Option<Loaded> = None;
    // The last event's id, once the load's events are all in `events`.
    let mut max_id: Option<u64> = None;
    let finished = loop {
        let last_id: Option<u64> = sqlx::query_scalar("SELECT MAX(last_id) FROM rollup_state")
            .fetch_one(&watch)
            .await?;
        let last_id = last_id.unwrap_or(0);
        let at = start.elapsed().as_secs_f64();
        marks.push((at, last_id));
        match &loaded {
            None if load.is_finished() => {
                let cpu = (counter.cpu().await?, counter.mariadbd_cpu()?, serve.cpu()?);
                let rows = table_rows(&counter.admin, &args.database).await?;
                let output = (&mut load).await??;
                let text = String::from_utf8_lossy(&output.stdout).into_owned();
                anyhow::ensure!(!text.contains("Non-2xx or 3xx"), "wrk saw errors:\n{text}");
                loaded = Some(Loaded {
                    at,
                    cpu,
                    rows,
                    text,
                });
            }
            None => {}
            Some(loaded) => {
                if max_id.is_none()
                    && linktrack::journal::segments::unreplayed_segments(&journal)?.is_empty()
                {
                    max_id = sqlx::query_scalar("SELECT MAX(id) FROM events")
                        .fetch_one(&watch)
                        .await?;
                }
                if max_id.is_some_and(|max| last_id >= max) {
                    break true;
                }
                if at - loaded.at > args.hot_wait as f64 {
                    eprintln!(
                        "note: the rollup had not finished {} s after the load: its pace is \
                         what it rolled by then",
                        args.hot_wait
                    );
                    break false;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (statements_after, mariadbd_after, serve_after) =
        (counter.cpu().await?, counter.mariadbd_cpu()?, serve.cpu()?);
    let rows_after = table_rows(&counter.admin, &args.database).await?;
    serve.stop().await?;
    let Some(Loaded {
        at: load_end,
        cpu: (statements_mid, mariadbd_mid, serve_mid),
        rows: rows_mid,
        text,
    }) = loaded
    else {
        anyhow::bail!("the load did not finish");
    };
    let (clicks_per_second, _, clicks) = wrk_figures(&text)?;

    // Events rolled by each mark: ids are not promised to be dense.
    let ids: Vec<u64> = sqlx::query_scalar("SELECT id FROM events ORDER BY id")
        .fetch_all(&watch)
        .await?;
    let rolled_by = |watermark: u64| ids.partition_point(|id| *id <= watermark) as f64;
    let bots: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE bot <> 0")
        .fetch_one(&watch)
        .await?;
    watch.close().await;
    let events = ids.len() as f64;
    if events < clicks * 0.99 {
        eprintln!("note: {events} events for {clicks} clicks");
    }
    let settle = args.settle_secs as f64;
    // Unfinished: the events rolled by the last mark, over its time.
    let (done, rolled) = match marks.iter().find(|(_, mark)| rolled_by(*mark) >= events) {
        Some((at, _)) => (*at, events),
        None => marks
            .last()
            .map(|(at, mark)| (*at, rolled_by(*mark)))
            .unwrap_or((f64::NAN, 0.0)),
    };
    let rolled_at_load_end = marks
        .iter()
        .rev()
        .find(|(at, _)| *at <= load_end)
        .map(|(_, watermark)| rolled_by(*watermark))
        .unwrap_or(0.0);
    let after = (rolled - rolled_at_load_end).max(1.0);
    let mut rows: Vec<(String, f64, f64)> = rows_after
        .iter()
        .map(|(table, (read, changed))| {
            let (read_before, changed_before) = rows_mid.get(table).copied().unwrap_or((0, 0));
            (
                table.clone(),
                read.saturating_sub(read_before) as f64 / after,
                changed.saturating_sub(changed_before) as f64 / after,
            )
        })
        .filter(|(_, read, changed)| read + changed >= 0.05)
        .collect();
    rows.sort_by(|a, b| (b.1 + b.2).total_cmp(&(a.1 + a.2)));
    Ok(HotFigure {
        clicks_per_second,
        events: events as u64,
        rolled_per_second: rolled / (done - settle),
        finished,
        lag: done - load_end - settle,
        server_cpu_per_event: (serve_after - serve_mid) / after,
        mariadbd_cpu_per_event: (mariadbd_after - mariadbd_mid) / after,
        statements_cpu_per_event: (statements_after - statements_mid) / after,
        server_cpu_per_click: (serve_mid - serve_before) / clicks.max(1.0),
        mariadbd_cpu_per_click: (mariadbd_mid - mariadbd_before) / clicks.max(1.0),
        bots: bots.max(0) as u64,
        rows,
    })
}

/// What was measured when the load ended: its time since the start, CPU
/// so far (MariaDB's statements, the whole `mariadbd`, the server), rows
/// so far, and wrk's output.
struct Loaded {
    at: f64,
    cpu: (f64, f64, f64),
    rows: HashMap<String, (u64, u64)>,
    text: String,
}

/// Rows read and changed so far of each table of `database`.
async fn table_rows(
    admin: &sqlx::MySqlPool,
    database: &str,
) -> anyhow::Result<HashMap<String, (u64, u64)>> {
    let rows: Vec<(String, u64, u64)> = sqlx::query_as(
        "SELECT TABLE_NAME, CAST(ROWS_READ AS UNSIGNED), CAST(ROWS_CHANGED AS UNSIGNED) \
         FROM information_schema.TABLE_STATISTICS WHERE TABLE_SCHEMA = ?",
    )
    .bind(database)
    .fetch_all(admin)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(table, read, changed)| (table, (read, changed)))
        .collect())
}
