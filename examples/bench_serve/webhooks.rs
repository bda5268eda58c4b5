//! Events out (issue 9): the redirect with webhooks on, and the receiver
//! process (this binary again) that counts what it is sent.

use super::*;

/// Set in the environment of the receiver process (this binary again).
pub(crate) const RECEIVER_PROCESS: &str = "LT_BENCH_WEBHOOK_RECEIVER";

/// What the sender did in one measurement with webhooks on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Drain {
    /// Events the receiver got while the load ran.
    pub(crate) during_load: u64,
    /// Events still to deliver when the load ended.
    pub(crate) queued_at_end: u64,
    /// From the end of the load until the receiver had every event.
    pub(crate) seconds: f64,
    /// False when it had not after [`DRAIN_LIMIT`].
    pub(crate) drained: bool,
}

/// The longest wait for the queue to drain after a load.
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(180);

/// The redirect with an endpoint of `batch` events per request on: a clean
/// outbox, then [`serve_load_with`] the receiver.
pub(crate) async fn webhooks_load(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    tokens: &[Token],
    receiver: &Receiver,
    batch: usize,
) -> anyhow::Result<(Figure, Drain)> {
    let admin = sqlx::MySqlPool::connect(&format!("{}/{}", args.server, args.database)).await?;
    sqlx::query("DELETE FROM outbox").execute(&admin).await?;
    admin.close().await;
    let outbound = Outbound::new(vec![receiver.endpoint(batch)?], RetryPolicy::default());
    let (figure, drain) = serve_load_with(
        args,
        counter,
        dir,
        Route::Redirect,
        tokens,
        &outbound,
        Some(receiver),
    )
    .await?;
    let drain = drain.ok_or_else(|| anyhow::anyhow!("no drain figures"))?;
    Ok((figure, drain))
}

/// The receiver process: its address, and a client to read its count.
pub(crate) struct Receiver {
    pub(crate) addr: SocketAddr,
    pub(crate) http: reqwest::Client,
    pub(crate) _child: tokio::process::Child,
}

impl Receiver {
    /// This binary again, as a receiver, at nice 19; it prints its address.
    pub(crate) async fn start() -> anyhow::Result<Receiver> {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new("nice")
            .args(["-n", "19"])
            .arg(std::env::current_exe()?)
            .env(RECEIVER_PROCESS, "1")
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("the receiver has no stdout"))?;
        let mut line = String::new();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut line)
            .await?;
        let addr = line.trim().parse()?;
        Ok(Receiver {
            addr,
            http: reqwest::Client::new(),
            _child: child,
        })
    }

    pub(crate) fn endpoint(&self, batch: usize) -> anyhow::Result<Endpoint> {
        Ok(Endpoint {
            name: format!("bench-{batch}"),
            target: Target::Webhook {
                url: format!("http://{}/hook", self.addr).parse()?,
                secret: Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?,
            },
            types: None,
            mailings: None,
            concurrency: 8,
            timeout: Duration::from_secs(10),
            batch,
            // The bench's receiver is on loopback: allowed explicitly.
            destinations: linktrack::destinations::Destinations::allowing_loopback(),
        })
    }

    /// Events received so far.
    pub(crate) async fn delivered(&self) -> anyhow::Result<u64> {
        let url = format!("http://{}/count", self.addr);
        Ok(self
            .http
            .get(url)
            .send()
            .await?
            .text()
            .await?
            .trim()
            .parse()?)
    }

    /// Wait until `events` more than `before` arrived (or [`DRAIN_LIMIT`]).
    pub(crate) async fn drain(&self, before: u64, events: u64) -> anyhow::Result<Drain> {
        let end = std::time::Instant::now();
        let during_load = self.delivered().await?.saturating_sub(before);
        let mut received = during_load;
        while received < events && end.elapsed() < DRAIN_LIMIT {
            tokio::time::sleep(Duration::from_millis(100)).await;
            received = self.delivered().await?.saturating_sub(before);
        }
        Ok(Drain {
            during_load,
            queued_at_end: events.saturating_sub(during_load),
            seconds: end.elapsed().as_secs_f64(),
            drained: received >= events,
        })
    }
}

/// The receiver: counts the events of every POST (one, or a batch's
/// `data` array, by their `event_id` fields) and answers 204; `GET /count`.
pub(crate) async fn receiver_process() -> anyhow::Result<()> {
    let events = Arc::new(AtomicU64::new(0));
    let counted = events.clone();
    let app = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let counted = counted.clone();
                async move {
                    let n = String::from_utf8_lossy(&body)
                        .matches("\"event_id\"")
                        .count();
                    counted.fetch_add(n as u64, Ordering::Relaxed);
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        )
        .route(
            "/count",
            axum::routing::get(move || {
                let events = events.clone();
                async move { events.load(Ordering::Relaxed).to_string() }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}
