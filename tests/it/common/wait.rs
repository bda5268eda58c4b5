//! Waiting in tests: the one way to wait for something to happen
//! (`eventually`) and the one way to show that something does not happen
//! (`never_within`). Every other polling loop or fixed sleep in the tests is
//! a flake waiting for a slow machine.
//!
//! A deadline here is a ceiling, not a measurement: a check that passes
//! returns at once, so a generous deadline costs nothing on a fast machine
//! and keeps a machine busy with other work (CI, two CPU hogs) from failing
//! a test that is right. `LINKTRACK_TEST_PATIENCE` multiplies every
//! deadline (say 3 on a very slow machine).

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a test waits for what should happen within a few seconds on a
/// quiet machine: long enough for a machine loaded many times over.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The first pause between checks; pauses double up to [`MAX_PAUSE`], so a
/// quick check answers quickly and a slow one does not hammer what it reads.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// `deadline` scaled by `LINKTRACK_TEST_PATIENCE` (a factor, default 1).
pub fn scaled(deadline: Duration) -> Duration {
    let factor = std::env::var("LINKTRACK_TEST_PATIENCE")
        .ok()
        .and_then(|f| f.trim().parse::<f64>().ok())
        .filter(|f| f.is_finite() && *f >= 1.0)
        .unwrap_or(1.0);
    deadline.mul_f64(factor)
}

/// Check until `check` gives `Ok(value)` and return the value; panic naming
/// `what` and the last `Err` seen when `deadline` passes first. The `Err`
/// says what was seen instead ("3 of 5 events"), so a failure explains
/// itself.
pub async fn eventually<T, E, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    E: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let give_up = Instant::now() + scaled(deadline);
    let mut pause = FIRST_PAUSE;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) if Instant::now() >= give_up => {
                panic!("{what}: not within {deadline:?}; last seen: {seen:?}")
            }
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// [`eventually`] for a value that must become `want`: the common case of
/// a count reaching its total.
pub async fn eventually_eq<T, F, Fut>(deadline: Duration, what: &str, want: T, mut probe: F)
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    eventually(deadline, what, || {
        let seen = probe();
        let want = &want;
        async move {
            let seen = seen.await;
            if &seen == want {
                Ok(())
            } else {
                Err(format!("{seen:?}, wanted {want:?}"))
            }
        }
    })
    .await
}

/// [`eventually`] for tests without a runtime (a thread waiting on a child
/// process or a file).
pub fn eventually_blocking<T, E, F>(deadline: Duration, what: &str, mut check: F) -> T
where
    E: std::fmt::Debug,
    F: FnMut() -> Result<T, E>,
{
    let give_up = Instant::now() + scaled(deadline);
    let mut pause = FIRST_PAUSE;
    loop {
        match check() {
            Ok(value) => return value,
            Err(seen) if Instant::now() >= give_up => {
                panic!("{what}: not within {deadline:?}; last seen: {seen:?}")
            }
            Err(_) => {}
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Show that something does not happen: check through `window` and panic
/// naming `what` and what `check` saw the first time it gives `Err`.
///
/// An absence can only be shown over a window, so the window is a claim the
/// caller makes and must justify in a comment at the call: it has to be
/// longer than the time the thing would take to happen if the code were
/// wrong (a worker's tick, a retry's delay), and a slow machine only makes
/// the thing slower, so a passing check is the weaker for it, never a false
/// failure. The window is not scaled by `LINKTRACK_TEST_PATIENCE`.
pub async fn never_within<E, F, Fut>(window: Duration, what: &str, mut check: F)
where
    E: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let end = Instant::now() + window;
    let mut pause = FIRST_PAUSE;
    loop {
        if let Err(seen) = check().await {
            panic!("{what}: happened within {window:?}: {seen:?}");
        }
        let now = Instant::now();
        if now >= end {
            return;
        }
        tokio::time::sleep(pause.min(end - now)).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

#[tokio::test]
async fn eventually_returns_the_value_once_the_check_passes() {
    let mut calls = 0;
    let value = eventually(PATIENCE, "the third call", || {
        calls += 1;
        let now = calls;
        async move {
            if now >= 3 {
                Ok(now * 10)
            } else {
                Err(now)
            }
        }
    })
    .await;
    assert_eq!(value, 30);
}

#[tokio::test]
#[should_panic(expected = "never true: not within")]
async fn eventually_gives_up_at_the_deadline_naming_what_it_saw() {
    eventually(Duration::from_millis(50), "never true", || async {
        Err::<(), _>("still false")
    })
    .await;
}

#[tokio::test]
#[should_panic(expected = "the flag: happened within")]
async fn never_within_fails_when_the_thing_happens() {
    let mut calls = 0;
    never_within(Duration::from_secs(5), "the flag", || {
        calls += 1;
        let now = calls;
        async move {
            if now < 3 {
                Ok(())
            } else {
                Err("set")
            }
        }
    })
    .await;
}

#[tokio::test]
async fn never_within_checks_through_the_whole_window() {
    let window = Duration::from_millis(100);
    let started = Instant::now();
    let mut last_check = started;
    never_within(window, "nothing", || {
        last_check = Instant::now();
        async { Ok::<(), ()>(()) }
    })
    .await;
    assert!(
        last_check >= started + window,
        "the last check came before the window's end"
    );
}
