//! A webhook receiver on a real socket (verifying with `standardwebhooks`),
//! letters whose every link is hit, endpoints and retry policies: what the
//! webhook, AMQP and held-event tests share.

use crate::common::TestDb;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use chrono::Utc;
use linktrack::outbound::{Endpoint, RetryPolicy, Target};
use linktrack::store::links::{self, LinkKind, NewLink};
use linktrack::token::Token;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

pub const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:130.0) Gecko/20100101 Firefox/130.0";

/// One delivery as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: String,
    pub body: serde_json::Value,
    /// What the receiver answered.
    pub status: u16,
}

#[derive(Default)]
pub struct ReceiverState {
    /// Answer this status (200 once `fail_first` requests were refused).
    status: AtomicU16,
    fail_first: AtomicUsize,
    seen: Mutex<Vec<Delivery>>,
    unverified: Mutex<Vec<String>>,
}

/// A webhook receiver on a real socket; verifies with `standardwebhooks`.
pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<ReceiverState>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listen on `addr` (port 0: any); refuse the first `fail_first`
    /// deliveries with `failing`, then answer 200.
    pub async fn start(addr: SocketAddr, fail_first: usize, failing: u16) -> Receiver {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        Receiver::on(listener, fail_first, failing)
    }

    /// [`Receiver::start`] on a listener the test bound.
    pub fn on(listener: tokio::net::TcpListener, fail_first: usize, failing: u16) -> Receiver {
        let state = Arc::new(ReceiverState::default());
        state.fail_first.store(fail_first, Ordering::SeqCst);
        state.status.store(failing, Ordering::SeqCst);
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(state.clone());
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { addr, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state.seen.lock().unwrap().clone()
    }

    /// Ids answered with 2xx.
    pub fn acknowledged(&self) -> BTreeSet<String> {
        self.deliveries()
            .into_iter()
            .filter(|d| d.status == 200)
            .map(|d| d.id)
            .collect()
    }

    pub fn assert_all_verified(&self) {
        let unverified = self.state.unverified.lock().unwrap();
        assert!(
            unverified.is_empty(),
            "unverified deliveries: {unverified:?}"
        );
    }

    /// Wait until `n` distinct events were acknowledged, `within` at most
    /// (a ceiling: [`eventually`](crate::common::wait::eventually)).
    pub async fn wait_for(&self, n: usize, within: Duration) -> BTreeSet<String> {
        let what = format!("{n} events acknowledged");
        crate::common::wait::eventually(within, &what, || async {
            let acknowledged = self.acknowledged();
            if acknowledged.len() >= n {
                Ok(acknowledged)
            } else {
                Err(self.deliveries())
            }
        })
        .await
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

pub async fn receive(
    State(state): State<Arc<ReceiverState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let verifier = standardwebhooks::Webhook::new(SECRET).unwrap();
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if let Err(err) = verifier.verify(&body, &headers) {
        state
            .unverified
            .lock()
            .unwrap()
            .push(format!("{id}: {err:?}"));
        return StatusCode::UNAUTHORIZED;
    }
    let refuse = state
        .fail_first
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let status = if refuse {
        state.status.load(Ordering::SeqCst)
    } else {
        200
    };
    state.seen.lock().unwrap().push(Delivery {
        id,
        body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        status,
    });
    StatusCode::from_u16(status).unwrap()
}

/// The links of one letter: two clicks, the pixel, the unsubscribe link
/// and the honeypot.
pub struct Letter {
    pub clicks: [Token; 2],
    pub pixel: Token,
    pub unsubscribe: Token,
    pub honeypot: Token,
}

pub async fn letter(db: &TestDb, letter_id: u64) -> Letter {
    let made = Utc::now() - chrono::Duration::hours(1);
    let seal = crate::common::seal_of(&db.pool).await;
    let link = |kind, position: u32, url: &str| NewLink {
        token: crate::common::sealed_token(&seal, made, kind),
        kind,
        mailing_id: "spring".into(),
        letter_id,
        email: format!("r{letter_id}@example.com"),
        position,
        url: url.into(),
        meta: Some(serde_json::json!({"tags": ["ruby"]})),
    };
    let rows = vec![
        link(LinkKind::Click, 1, "https://example.com/a?x=1&y=2"),
        link(LinkKind::Click, 2, "https://example.com/b"),
        link(LinkKind::Pixel, 0, ""),
        link(LinkKind::Unsubscribe, 0, ""),
        link(LinkKind::Honeypot, 0, ""),
    ];
    links::insert(&db.pool, &rows).await.unwrap();
    Letter {
        clicks: [rows[0].token, rows[1].token],
        pixel: rows[2].token,
        unsubscribe: rows[3].token,
        honeypot: rows[4].token,
    }
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(BROWSER)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Click both links, load the pixel, unsubscribe (one-click POST): four
/// events, each answered by the server.
pub async fn hit_everything(base: &str, letter: &Letter) {
    let http = http();
    for token in letter.clicks {
        let r = http.get(format!("{base}/c/{token}")).send().await.unwrap();
        assert_eq!(r.status(), 302);
    }
    let r = http
        .get(format!("{base}/o/{}.gif", letter.pixel))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .post(format!("{base}/u/{}", letter.unsubscribe))
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

pub fn endpoint(name: &str, url: &str) -> Endpoint {
    Endpoint {
        name: name.into(),
        target: Target::Webhook {
            url: url.parse().unwrap(),
            secret: linktrack::outbound::signature::Secret::parse(SECRET).unwrap(),
        },
        types: None,
        mailings: None,
        concurrency: 4,
        batch: 1,
        timeout: Duration::from_secs(2),
        // The test receiver is on loopback: allowed explicitly, as an
        // operator allows an internal receiver (issue 43).
        destinations: linktrack::destinations::Destinations::allowing_loopback(),
    }
}

pub fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(100),
        max: Duration::from_millis(500),
        poll: Duration::from_millis(100),
        ..RetryPolicy::default()
    }
}

/// The value of `metric` labelled with `endpoint` (and `extra`) on `/metrics`.
pub async fn metric(admin: &str, metric: &str, endpoint: &str, extra: &str) -> Option<f64> {
    let text = crate::common::metrics_text(admin).await;
    let label = format!("endpoint=\"{endpoint}\"");
    text.lines()
        .filter(|line| line.starts_with(&format!("{metric}{{")))
        .find(|line| line.contains(&label) && line.contains(extra))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}
