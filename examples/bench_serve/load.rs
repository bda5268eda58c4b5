//! The loads `bench_serve` measures: sysbench against the database, wrk
//! against a server of its own, callgrind windows, and the figures read
//! from their output.

use super::*;

/// The server's own MariaDB user, its statements counted by the server.
pub(crate) struct ServerUser {
    pub(crate) admin: sqlx::MySqlPool,
    pub(crate) url: String,
    /// Named as the database.
    pub(crate) name: String,
    /// `/proc/{pid}/stat` of the `mariadbd` process, when it runs on this
    /// machine (its pid file is readable here).
    pub(crate) mariadbd_stat: Option<PathBuf>,
}

impl ServerUser {
    pub(crate) async fn create(server: &str, database: &str) -> anyhow::Result<ServerUser> {
        let admin = sqlx::MySqlPool::connect(server).await?;
        for sql in [
            "SET GLOBAL userstat = 1".to_owned(),
            format!("CREATE USER IF NOT EXISTS '{database}'@'%'"),
            format!("GRANT ALL ON `{database}`.* TO '{database}'@'%'"),
        ] {
            sqlx::query(&sql).execute(&admin).await?;
        }
        let host = server
            .strip_prefix("mysql://")
            .and_then(|rest| rest.split_once('@').map(|(_, host)| host))
            .unwrap_or("127.0.0.1:3306");
        let url = format!("mysql://{database}@{host}/{database}");
        let mariadbd_stat = mariadbd_stat(&admin).await;
        if mariadbd_stat.is_none() {
            eprintln!("note: MariaDB's process is not on this machine: its CPU is not counted");
        }
        Ok(ServerUser {
            admin,
            url,
            name: database.to_owned(),
            mariadbd_stat,
        })
    }

    /// CPU seconds the whole `mariadbd` process has used so far (0 when it
    /// is not on this machine).
    pub(crate) fn mariadbd_cpu(&self) -> anyhow::Result<f64> {
        match &self.mariadbd_stat {
            Some(stat) => Ok(ProcessCpu::read(stat)?.own),
            None => Ok(0.0),
        }
    }

    /// CPU seconds MariaDB has spent on the user's statements so far
    /// (`USER_STATISTICS.CPU_TIME`): other users of the database server,
    /// such as a test suite running beside the benchmark, are not counted.
    pub(crate) async fn cpu(&self) -> anyhow::Result<f64> {
        let seconds: Option<f64> = sqlx::query_scalar(
            "SELECT CAST(CPU_TIME AS DOUBLE) FROM information_schema.USER_STATISTICS WHERE USER = ?",
        )
        .bind(&self.name)
        .fetch_optional(&self.admin)
        .await?;
        Ok(seconds.unwrap_or(0.0))
    }

    /// Every statement the server's user has run so far.
    pub(crate) async fn statements(&self) -> anyhow::Result<f64> {
        let total: Option<i64> = sqlx::query_scalar(
            "SELECT CAST(SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS AS SIGNED) \
             FROM information_schema.USER_STATISTICS WHERE USER = ?",
        )
        .bind(&self.name)
        .fetch_optional(&self.admin)
        .await?;
        Ok(total.unwrap_or(0) as f64)
    }
}

/// The ceiling: sysbench's C client runs the redirect's lookup as a
/// prepared statement over `tokens` (each thread its share, each token once).
pub(crate) async fn sysbench(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    tokens: &[Token],
) -> anyhow::Result<Figure> {
    let share_dir = dir.join("sysbench-tokens");
    let _ = std::fs::remove_dir_all(&share_dir);
    std::fs::create_dir_all(&share_dir)?;
    let mut shares: Vec<_> = (0..args.connections)
        .map(|t| {
            std::fs::File::create(share_dir.join(format!("{t}.txt"))).map(std::io::BufWriter::new)
        })
        .collect::<Result<_, _>>()?;
    for (n, token) in tokens.iter().enumerate() {
        writeln!(shares[n % args.connections], "{token} {}", token.date())?;
    }
    for share in &mut shares {
        share.flush()?;
    }
    let script = dir.join("lookup.lua");
    std::fs::write(&script, SYSBENCH_SCRIPT)?;
    let cpu_before = counter.cpu().await?;
    let (mariadbd_before, reaped_before) = (counter.mariadbd_cpu()?, ProcessCpu::this()?.children);
    let output = tokio::process::Command::new("sysbench")
        .args([
            "--db-driver=mysql",
            "--mysql-host=127.0.0.1",
            "--mysql-port=3306",
            // As the server's user, so USER_STATISTICS counts its CPU alike.
            &format!("--mysql-user={}", args.database),
            &format!("--mysql-db={}", args.database),
            &format!("--threads={}", args.connections),
            &format!("--time={}", args.seconds),
            "--percentile=99",
        ])
        .arg(&script)
        .arg("run")
        .env("LT_TOKENS_DIR", &share_dir)
        .output()
        .await?;
    let database_cpu = counter.cpu().await? - cpu_before;
    let mariadbd_cpu = counter.mariadbd_cpu()? - mariadbd_before;
    let sysbench_cpu = ProcessCpu::this()?.children - reaped_before;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "sysbench failed:\n{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let queries_line = text
        .lines()
        .find(|l| l.trim_start().starts_with("queries:"))
        .ok_or_else(|| anyhow::anyhow!("no queries line in sysbench output:\n{text}"))?;
    let requests = queries_line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("unreadable: {queries_line}"))?;
    let per_second = queries_line
        .split('(')
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("unreadable: {queries_line}"))?;
    let p99_ms = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99th percentile:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no 99th percentile in sysbench output:\n{text}"))?;
    if requests > tokens.len() as f64 {
        eprintln!("note: sysbench asked for more lookups than its slice has tokens");
    }
    Ok(Figure {
        per_second,
        p99: p99_ms / 1e3,
        statements_per_hit: 1.0,
        database_cpu_per_hit: database_cpu / requests.max(1.0),
        generator_cpu_per_hit: sysbench_cpu / requests.max(1.0),
        mariadbd_cpu_per_hit: mariadbd_cpu / requests.max(1.0),
        ..Figure::default()
    })
}

/// sysbench's script: thread `tid` walks its own token file once.
pub(crate) const SYSBENCH_SCRIPT: &str = r#"
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
  tokens = {}
  for line in io.lines(os.getenv("LT_TOKENS_DIR") .. "/" .. sysbench.tid .. ".txt") do
    local hex, day = line:match("(%x+) (%S+)")
    tokens[#tokens + 1] = { hex, day }
  end
  next_token = 1
  stmt = con:prepare("SELECT id, CAST(kind AS CHAR), mailing_id, letter_id, email, position, url " ..
                     "FROM links WHERE uuid = UNHEX(?) AND inserted = ?")
  uuid = stmt:bind_create(sysbench.sql.type.VARCHAR, 32)
  day = stmt:bind_create(sysbench.sql.type.VARCHAR, 10)
  stmt:bind_param(uuid, day)
end

function event()
  local token = tokens[next_token]
  next_token = next_token % #tokens + 1
  uuid:set(token[1])
  day:set(token[2])
  stmt:execute()
end

function thread_done()
  stmt:close()
  con:disconnect()
end
"#;

/// The user agent of every request: a reader's browser, so each hit goes
/// through all of the bot checks (wrk sends none, which is a bot at once).
pub(crate) const BROWSER: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

/// A wrk script (in `dir`, returned) asking for `route` with `tokens`,
/// each once: thread `t` of `WRK_THREADS` takes every `WRK_THREADS`-th
/// token from the `t`-th on.
pub(crate) fn write_wrk_script(
    dir: &Path,
    route: Route,
    tokens: &[Token],
) -> anyhow::Result<PathBuf> {
    let (prefix, suffix) = route.wrk_path();
    let path = dir.join("load.lua");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    writeln!(out, "tokens = {{")?;
    for token in tokens {
        writeln!(out, "\"{}\",", route.token_for(*token))?;
    }
    writeln!(
        out,
        r#"}}
local threads = 0
function setup(thread) thread:set("n", threads); threads = threads + 1 end
wrk.headers["User-Agent"] = "{BROWSER}"
function request()
  n = n + {WRK_THREADS}
  return wrk.format("GET", "{prefix}" .. tokens[n % #tokens + 1] .. "{suffix}")
end"#
    )?;
    out.flush()?;
    Ok(path)
}

/// Start a new server, load it with wrk, stop it (its events replayed);
/// the figure counts the server user's statements over all of that.
pub(crate) async fn serve_load(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    route: Route,
    tokens: &[Token],
    outbound: &Outbound,
) -> anyhow::Result<Figure> {
    let measured = serve_load_with(args, counter, dir, route, tokens, outbound, None).await?;
    Ok(measured.0)
}

/// [`serve_load`], and with a receiver: how the sender drained (the server
/// runs until the receiver has every event of the load, or [`DRAIN_LIMIT`]).
pub(crate) async fn serve_load_with(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    route: Route,
    tokens: &[Token],
    outbound: &Outbound,
    receiver: Option<&Receiver>,
) -> anyhow::Result<(Figure, Option<Drain>)> {
    let script = write_wrk_script(dir, route, tokens)?;
    let server = BenchServer::start(args, counter, dir, outbound).await?;
    let before = counter.statements().await?;
    let delivered_before = match receiver {
        Some(receiver) => receiver.delivered().await?,
        None => 0,
    };
    let (database_cpu, mariadbd_cpu) = (counter.cpu().await?, counter.mariadbd_cpu()?);
    let before_load = ProcessCpu::this()?;
    let output = wrk(args, args.seconds, &script, server.addr).await?;
    let after_load = ProcessCpu::this()?;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(!text.contains("Non-2xx or 3xx"), "wrk saw errors:\n{text}");
    let (per_second, p99, requests) = wrk_figures(&text)?;
    let replayed_after = wait_replayed(&server.journal).await?;
    let database_cpu = counter.cpu().await? - database_cpu;
    let mariadbd_cpu = counter.mariadbd_cpu()? - mariadbd_cpu;
    let server_cpu = ProcessCpu::this()?.own - before_load.own;
    let server_cpu_in_load = after_load.own - before_load.own;
    // wrk is the only child reaped while it ran (the webhook receiver is
    // reaped when the run ends).
    let wrk_cpu = after_load.children - before_load.children;
    let drain = match receiver {
        Some(receiver) => Some(receiver.drain(delivered_before, requests as u64).await?),
        None => None,
    };
    server.stop().await;
    let statements = counter.statements().await? - before;
    if route.reads_links() && requests > tokens.len() as f64 {
        eprintln!("note: wrk asked for more than its slice's tokens: some were asked twice");
    }
    let hits = requests.max(1.0);
    let figure = Figure {
        per_second,
        p99,
        statements_per_hit: statements / hits,
        database_cpu_per_hit: database_cpu / hits,
        server_cpu_per_hit: server_cpu / hits,
        server_cpu_in_load_per_hit: server_cpu_in_load / hits,
        generator_cpu_per_hit: wrk_cpu / hits,
        mariadbd_cpu_per_hit: mariadbd_cpu / hits,
        replayed_after,
    };
    Ok((figure, drain))
}

/// The longest wait for a load's events to be replayed into the database.
pub(crate) const REPLAY_LIMIT: Duration = Duration::from_secs(600);

/// Wait until the journal directory holds no segment (every event of the
/// load is in the database); returns the seconds that took. Measuring up
/// to here charges the replay to the load that caused it, and the next
/// measurement starts without a backlog.
pub(crate) async fn wait_replayed(journal: &Path) -> anyhow::Result<f64> {
    let start = std::time::Instant::now();
    loop {
        if linktrack::journal::segments::unreplayed_segments(journal)?.is_empty() {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > REPLAY_LIMIT {
            eprintln!("note: the journal was not replayed within {REPLAY_LIMIT:?}");
            return Ok(start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A new server on the server user's own pool, running on a task.
pub(crate) struct BenchServer {
    pub(crate) addr: std::net::SocketAddr,
    /// Its own journal directory, so no measurement replays another's events.
    pub(crate) journal: std::path::PathBuf,
    pub(crate) admin: Option<std::net::SocketAddr>,
    pub(crate) pool: sqlx::MySqlPool,
    pub(crate) stop: tokio::sync::oneshot::Sender<()>,
    pub(crate) running: tokio::task::JoinHandle<Result<(), linktrack::server::ServeError>>,
}

impl BenchServer {
    pub(crate) async fn start(
        args: &Args,
        counter: &ServerUser,
        dir: &Path,
        outbound: &Outbound,
    ) -> anyhow::Result<BenchServer> {
        let settings = PoolSettings {
            max_connections: args.pool,
            acquire_timeout: Duration::from_secs(5),
        };
        let pool = store::connect(&counter.url, &settings).await?;
        static SERVERS: AtomicU64 = AtomicU64::new(0);
        let journal = dir.join(format!(
            "journal-{}",
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let mut settings = AppSettings {
            outbound: outbound.clone(),
            ..AppSettings::new(pool.clone(), JournalSettings::new(&journal))
        };
        settings.server.lookups_in_flight = args.in_flight;
        let server = App::build(settings, listener).await?;
        let addr = server.local_addr()?;
        let admin = server.admin_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Ok(BenchServer {
            addr,
            journal,
            admin,
            pool,
            stop,
            running,
        })
    }

    /// Stop serving and wait until the journal is replayed.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.running.await;
        self.pool.close().await;
    }
}

/// Run wrk for `seconds` on `addr`, asking for `script`'s paths.
pub(crate) async fn wrk(
    args: &Args,
    seconds: u64,
    script: &Path,
    addr: std::net::SocketAddr,
) -> anyhow::Result<std::process::Output> {
    let mut wrk = tokio::process::Command::new("wrk");
    wrk.args([
        &format!("-t{WRK_THREADS}"),
        &format!("-c{}", args.connections),
        &format!("-d{seconds}s"),
        "--timeout",
        "30s",
        "--latency",
    ]);
    wrk.arg("-s").arg(script);
    Ok(wrk.arg(format!("http://{addr}/")).output().await?)
}

/// Instructions per hit of `--callgrind-route` (see the module docs): zero
/// callgrind's counters, load the route for `seconds`, dump them, wait for
/// the load's events to be replayed, dump again, and divide each dump's
/// total by the hits the server counted.
pub(crate) async fn callgrind_hits(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    tokens: &[Token],
    seconds: u64,
) -> anyhow::Result<()> {
    let route = args.callgrind_route;
    let script = write_wrk_script(dir, route, tokens)?;
    let server = BenchServer::start(args, counter, dir, &Outbound::default()).await?;
    let admin = server
        .admin
        .ok_or_else(|| anyhow::anyhow!("the server has no admin listener"))?;
    let before = hits_served(admin, route).await?;
    callgrind_control("-z")?;
    let output = wrk(args, seconds, &script, server.addr).await?;
    let dumped = callgrind_control("-d")?;
    let in_load = dumped_instructions()?;
    let hits = hits_served(admin, route).await? - before;
    wait_replayed(&server.journal).await?;
    callgrind_control("-d")?;
    let in_replay = dumped_instructions()?;
    server.stop().await;
    eprintln!("{}", String::from_utf8_lossy(&output.stdout));
    let per_hit = |instructions: u64| instructions as f64 / hits.max(1) as f64;
    println!(
        "callgrind: {} hits of {} ({} connections): {:.0} instructions per hit \
         in the load ({in_load} in all), {:.0} more in its replay ({in_replay})\n{dumped}",
        hits,
        route.matched_path(),
        args.connections,
        per_hit(in_load),
        per_hit(in_replay),
    );
    Ok(())
}

/// Run `callgrind_control OPTION` on this process.
pub(crate) fn callgrind_control(option: &str) -> anyhow::Result<String> {
    let output = std::process::Command::new("callgrind_control")
        .arg(option)
        .arg(std::process::id().to_string())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    anyhow::ensure!(
        output.status.success() && !text.contains("Error"),
        "callgrind_control {option} failed (is this process running under \
         valgrind --tool=callgrind?):\n{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(text.trim().to_owned())
}

/// The instruction total of this process's newest callgrind dump.
pub(crate) fn dumped_instructions() -> anyhow::Result<u64> {
    let prefix = format!("callgrind.out.{}.", std::process::id());
    let newest = std::fs::read_dir(".")?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .ok_or_else(|| anyhow::anyhow!("no {prefix}* in the working directory"))?;
    let text = std::fs::read_to_string(newest.path())?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no summary line in {}", newest.path().display()))
}

/// Requests of `route` the server has answered so far, by its `/metrics`.
pub(crate) async fn hits_served(admin: std::net::SocketAddr, route: Route) -> anyhow::Result<u64> {
    let text = reqwest::get(format!("http://{admin}/metrics"))
        .await?
        .text()
        .await?;
    let label = format!(r#"route="{}""#, route.matched_path());
    Ok(text
        .lines()
        .filter(|l| l.starts_with("linktrack_http_requests_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

/// Requests/s, p99 (s) and requests of wrk's output.
pub(crate) fn wrk_figures(text: &str) -> anyhow::Result<(f64, f64, f64)> {
    let per_second = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no Requests/sec in wrk output:\n{text}"))?;
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .and_then(|v| seconds(v.trim()))
        .ok_or_else(|| anyhow::anyhow!("no 99% latency in wrk output:\n{text}"))?;
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no request count in wrk output:\n{text}"))?;
    Ok((per_second, p99, requests))
}

/// The median of each field over rounds.
pub(crate) fn median(rounds: &[Figure]) -> Figure {
    let median = |field: fn(&Figure) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(field).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    Figure {
        per_second: median(|f| f.per_second),
        p99: median(|f| f.p99),
        statements_per_hit: median(|f| f.statements_per_hit),
        database_cpu_per_hit: median(|f| f.database_cpu_per_hit),
        server_cpu_per_hit: median(|f| f.server_cpu_per_hit),
        server_cpu_in_load_per_hit: median(|f| f.server_cpu_in_load_per_hit),
        generator_cpu_per_hit: median(|f| f.generator_cpu_per_hit),
        mariadbd_cpu_per_hit: median(|f| f.mariadbd_cpu_per_hit),
        replayed_after: median(|f| f.replayed_after),
    }
}

/// wrk's durations: `812.00us`, `3.45ms`, `1.02s`.
pub(crate) fn seconds(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    match unit {
        "us" => Some(value / 1e6),
        "ms" => Some(value / 1e3),
        "s" => Some(value),
        "m" => Some(value * 60.0),
        _ => None,
    }
}

// ---- Events out (issue 9): the redirect with webhooks on ----
