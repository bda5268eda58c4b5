//! `kill -9` the real server binary under load: every click it answered with
//! a 302 must reach `events`, from the journal, once a new server starts.

use crate::common::wait::{self, eventually, PATIENCE};
use crate::common::{click_link, days_ago, serve_command, Serving, TestDb};
use linktrack::store::links::{self, LinkKind, NewLink};
use linktrack::token::Token;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

async fn clicks_in_db(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE kind = 'click'")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// The user agent of every stored click (each request's own, see below).
async fn click_agents(db: &TestDb) -> Vec<String> {
    sqlx::query_scalar("SELECT user_agent FROM events WHERE kind = 'click'")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_answered_click() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let made = chrono::Utc::now() - chrono::Duration::hours(1);
    let seal = crate::common::seal_of(&db.pool).await;
    // Letters 1..=50: each click is one reader's, so its event keeps the
    // user agent (letter 0 is a shared row's, which keeps none).
    let rows: Vec<NewLink> = (1..=50)
        .map(|n| click_link(crate::common::sealed_token(&seal, made, LinkKind::Click), n))
        .collect();
    links::insert(&db.pool, &rows).await.unwrap();
    let tokens: Arc<Vec<Token>> = Arc::new(rows.iter().map(|r| r.token).collect());

    let journal = tempfile::tempdir().unwrap();
    let mut server = Serving::spawn(serve_command(&db, journal.path(), &[])).await;
    let addr = server.addr;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // 16 clients click as fast as they can. Every request carries its own
    // user agent (client and sequence number), which its event stores, so
    // each answered click can be found among the events, not just counted.
    let answered = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for client in 0..16usize {
        let (http, tokens, answered, stop) =
            (http.clone(), tokens.clone(), answered.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut n = client;
            // A ceiling on the load should the test stop before `stop` is
            // set, not a wait: the clients stop when `stop` is set or the
            // killed server stops answering.
            let deadline = Instant::now() + wait::scaled(PATIENCE);
            let mut sequence = 0u64;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let url = format!("http://{addr}/c/{}", tokens[n % tokens.len()]);
                n += 7;
                sequence += 1;
                let agent = format!("Mozilla/5.0 Firefox/130 c{client}s{sequence}");
                match http.get(url).header("user-agent", &agent).send().await {
                    Ok(r) if r.status() == 302 => {
                        answered.lock().unwrap().push(agent);
                    }
                    Ok(r) => panic!("unexpected {}", r.status()),
                    Err(_) => break, // the server is gone
                }
            }
        }));
    }
    // Killed mid-load: once 200 clicks were answered (the load has reached
    // the server, whatever the machine's speed), while it goes on.
    eventually(PATIENCE, "200 clicks answered", || async {
        match answered.lock().unwrap().len() {
            n if n >= 200 => Ok(()),
            n => Err(n),
        }
    })
    .await;
    server.child.kill().unwrap(); // SIGKILL, mid-load: no flush, no clean stop
    server.child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let answered: HashSet<String> = answered.lock().unwrap().drain(..).collect();
    let answered_count = answered.len() as i64;
    // The journal is sealed every 250 ms, so a kill mid-load always leaves
    // answered clicks that only the journal holds: this is what is tested.
    let before_restart = clicks_in_db(&db).await;
    assert!(
        before_restart < answered_count,
        "the kill left clicks in the journal only"
    );
    assert!(
        answered_count > 100,
        "the load reached the server ({answered_count} answered)"
    );

    // A new server on the same journal replays what the dead one journaled:
    // every click answered with a 302 gets its event.
    let mut restarted = Serving::spawn(serve_command(&db, journal.path(), &[])).await;
    eventually(PATIENCE, "every answered click stored", || async {
        let stored: HashSet<String> = click_agents(&db).await.into_iter().collect();
        let lost: Vec<&String> = answered.difference(&stored).collect();
        if lost.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} of {answered_count} answered clicks have no event: {lost:?}",
                lost.len()
            ))
        }
    })
    .await;
    restarted.terminate().await;
    let agents = click_agents(&db).await;
    let stored: HashSet<String> = agents.iter().cloned().collect();
    // Each of them once.
    assert_eq!(agents.len(), stored.len(), "a click was stored twice");
    // The rest were journaled but never answered: at most the one request
    // each client had in flight at the kill.
    let unanswered: Vec<&String> = stored.difference(&answered).collect();
    assert!(
        unanswered.len() <= 16,
        "more unanswered clicks stored than clients in flight: {unanswered:?}"
    );
    let (rows, distinct): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM events")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows, distinct);
}
