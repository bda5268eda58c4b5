//! One way to retry: how many attempts, how long to wait between them
//! (a base delay grown by a factor, capped, with jitter), a deadline, and
//! which errors are worth another attempt. [`Backoff`] only computes:
//! the loops that retry keep their own logs, metrics and stored state.
//!
//! The four loops that use it, and their rules (each kept exactly as it
//! was before this module; a test beside each loop writes its old numbers
//! out):
//!
//! - **SMTP delivery** (`delivery/smtp/`, `Lane::deliver`): `--smtp-retries`
//!   retries after the first attempt (`retries + 1` attempts), the first
//!   retry after `--smtp-backoff-ms`, each further one twice the one
//!   before, no cap, no jitter, no deadline. A permanent refusal (5xx) or a
//!   message the MTA can never take is the letter's outcome at once; every
//!   other failure (4xx, refused or broken connection, timeout) is
//!   retried, each retry logged (`temporary SMTP failure; retrying`) and
//!   counted (`linktrack_smtp_retries_total`, the MTA's `retried`).
//! - **Events out** (`outbound/`, `RetryPolicy`): attempts unlimited; the
//!   delay after `n` failures is `base × 2^(n-1)` (the doubling stops after
//!   30 steps), at most `max`, then times a jitter in [0.75, 1.25) (so a
//!   delay can be up to 1.25 × `max`). The deadline is the event's age
//!   since it was queued, read from the database: at `give_up_after` the
//!   event goes to the dead letters. The receiver's answer says which
//!   failures retry (`Outcome::Retry`) and which are for good
//!   (`Outcome::Permanent`). The failure count and the next attempt's time
//!   are stored in `outbox`; this module only says the delay.
//! - **The event journal** (`journal/`, `retry_after`): the replay and the
//!   fallback drain retry a failed pass forever, `retry_after` apart (1 s
//!   by default), no growth, no jitter, no deadline but the stop signal.
//!   Every failure of the drain retries; the replay sets a segment the
//!   database rejects or cannot read aside instead (not retried).
//! - **Link lookups** (`server/lookups.rs`, `on_a_live_connection`): a
//!   lookup that met a dead pooled connection runs again at once (no
//!   delay), at most the pool's connections plus one attempts in all; only
//!   a broken connection retries (`StoreError::is_broken_connection`), each
//!   retry counted (`linktrack_link_lookup_retries_total`) and logged at
//!   debug. The caller's time limit bounds them all (it wraps the loop).
//!
//! Why not a crate: `backoff` is unmaintained (RUSTSEC-2025-0012), and
//! `backon`'s jitter adds up to one more delay (`[d, 2d)`, not the
//! outbound's ±25 % around it) and its schedule is an iterator, while the
//! outbound sender needs the delay for a failure count it reads back from
//! the database.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How many attempts in all, the first one included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempts {
    Limited(u32),
    Unlimited,
}

/// How a delay is spread, so that attempts that failed together do not
/// come back together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// The delay as computed.
    None,
    /// Anywhere in `[0, delay)`.
    Full,
    /// Anywhere in `[delay × (1 - f), delay × (1 + f))` for `Spread(f)`.
    Spread(f64),
}

/// Why a loop stops retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The error is not one that another attempt can cure.
    NotRetryable,
    /// Every attempt has been made.
    Exhausted,
    /// The deadline has passed.
    PastDeadline,
}

/// A retry schedule: attempts, delays and deadline. Plain data, cheap to
/// copy; see the module docs for the loops that use it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub attempts: Attempts,
    /// The wait before the first retry.
    pub base: Duration,
    /// Each further retry waits this many times the one before.
    pub factor: u32,
    /// The delay grows for this many retries at most, then stays.
    pub growth_stops_after: Option<u32>,
    /// The longest delay before jitter.
    pub cap: Option<Duration>,
    pub jitter: Jitter,
    /// No retry once this long has passed since the first attempt.
    pub deadline: Option<Duration>,
}

impl Backoff {
    /// The same wait before every retry, forever.
    pub const fn constant(delay: Duration) -> Backoff {
        Backoff::exponential(delay, 1)
    }

    /// `base`, then `base × factor`, `base × factor²`…, forever, no cap,
    /// no jitter, no deadline (the `with_` methods add them).
    pub const fn exponential(base: Duration, factor: u32) -> Backoff {
        Backoff {
            attempts: Attempts::Unlimited,
            base,
            factor,
            growth_stops_after: None,
            cap: None,
            jitter: Jitter::None,
            deadline: None,
        }
    }

    pub const fn with_attempts(self, attempts: Attempts) -> Backoff {
        Backoff { attempts, ..self }
    }

    pub const fn with_growth_stopping_after(self, retries: u32) -> Backoff {
        Backoff {
            growth_stops_after: Some(retries),
            ..self
        }
    }

    pub const fn with_cap(self, cap: Duration) -> Backoff {
        Backoff {
            cap: Some(cap),
            ..self
        }
    }

    pub const fn with_jitter(self, jitter: Jitter) -> Backoff {
        Backoff { jitter, ..self }
    }

    pub const fn with_deadline(self, deadline: Duration) -> Backoff {
        Backoff {
            deadline: Some(deadline),
            ..self
        }
    }

    /// The wait before retry `retry` (0: the first retry, after the first
    /// failure), jittered with the thread's random numbers.
    pub fn delay(&self, retry: u32) -> Duration {
        self.delay_drawn(retry, rand::random::<f64>)
    }

    /// [`Backoff::delay`] with the jitter's random number in `[0, 1)`
    /// drawn from `draw` (called only when there is jitter): a seeded or
    /// fixed source makes the schedule repeatable.
    pub fn delay_drawn(&self, retry: u32, draw: impl FnOnce() -> f64) -> Duration {
        let grown = self.grown(retry);
        let capped = self.cap.map_or(grown, |cap| grown.min(cap));
        match self.jitter {
            Jitter::None => capped,
            Jitter::Full => capped.mul_f64(draw()),
            Jitter::Spread(spread) => capped.mul_f64((1.0 - spread) + draw() * (2.0 * spread)),
        }
    }

    /// `base × factor^retry` (the exponent held at `growth_stops_after`),
    /// saturating at `Duration::MAX`.
    fn grown(&self, retry: u32) -> Duration {
        let steps = self
            .growth_stops_after
            .map_or(retry, |most| retry.min(most));
        let nanos = self
            .base
            .as_nanos()
            .saturating_mul(u128::from(self.factor).saturating_pow(steps));
        duration_from_nanos(nanos)
    }

    /// After `failures` failed attempts, `elapsed` after the first began,
    /// the last one's error `retryable` or not: the wait before the next
    /// attempt, or why there is none.
    pub fn next(
        &self,
        failures: u32,
        elapsed: Duration,
        retryable: bool,
    ) -> Result<Duration, Stop> {
        if !retryable {
            return Err(Stop::NotRetryable);
        }
        if let Attempts::Limited(most) = self.attempts {
            if failures >= most {
                return Err(Stop::Exhausted);
            }
        }
        if self.deadline.is_some_and(|deadline| elapsed >= deadline) {
            return Err(Stop::PastDeadline);
        }
        Ok(self.delay(failures.saturating_sub(1)))
    }

    /// A loop's count of failures and its clock, started now (the clock
    /// is read only when there is a deadline).
    pub fn start(&self) -> Retries {
        Retries {
            backoff: *self,
            failures: 0,
            started: self.deadline.map(|_| Instant::now()),
        }
    }

    /// Run `attempt` until it succeeds or [`Backoff::next`] says stop (the
    /// last error is returned). `retryable` says which errors are worth
    /// another attempt; `on_retry` hears of each retry (the error, the
    /// failures so far, the wait) before its wait, for logs and metrics. A
    /// zero wait does not sleep.
    pub async fn retry<T, E, Attempt>(
        &self,
        mut attempt: impl FnMut() -> Attempt,
        retryable: impl Fn(&E) -> bool,
        mut on_retry: impl FnMut(&E, u32, Duration),
    ) -> Result<T, E>
    where
        Attempt: Future<Output = Result<T, E>>,
    {
        let mut retries = self.start();
        loop {
            let err = match attempt().await {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            let Ok(wait) = retries.failed(retryable(&err)) else {
                return Err(err);
            };
            on_retry(&err, retries.failures(), wait);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// One loop's progress through a [`Backoff`]: failures so far, and when
/// the first attempt began (for the deadline, when there is one).
#[derive(Debug, Clone)]
pub struct Retries {
    backoff: Backoff,
    failures: u32,
    started: Option<Instant>,
}

impl Retries {
    /// An attempt failed (`retryable`: with an error worth another one):
    /// the wait before the next attempt, or why there is none.
    pub fn failed(&mut self, retryable: bool) -> Result<Duration, Stop> {
        self.failures = self.failures.saturating_add(1);
        let elapsed = self.started.map_or(Duration::ZERO, |at| at.elapsed());
        self.backoff.next(self.failures, elapsed, retryable)
    }

    /// Failed attempts so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// A failed pass of a loop that runs until it is stopped (attempts and
    /// deadline do not apply to it): the wait before the next pass, by the
    /// failures in a row so far.
    pub fn wait_after_failure(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.backoff.delay(self.failures - 1)
    }

    /// A pass succeeded: the next failure waits as the first one did.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }
}

/// A count of nanoseconds as a `Duration`, `Duration::MAX` past it.
fn duration_from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SEC) {
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn schedule(backoff: &Backoff, retries: u32) -> Vec<Duration> {
        (0..retries).map(|retry| backoff.delay(retry)).collect()
    }

    #[test]
    fn delays_grow_by_the_factor() {
        let doubling = Backoff::exponential(ms(100), 2);
        assert_eq!(
            schedule(&doubling, 5),
            [ms(100), ms(200), ms(400), ms(800), ms(1_600)]
        );
        let tripling = Backoff::exponential(ms(10), 3);
        assert_eq!(schedule(&tripling, 3), [ms(10), ms(30), ms(90)]);
        assert_eq!(schedule(&Backoff::constant(ms(7)), 3), [ms(7); 3]);
    }

    #[test]
    fn the_cap_bounds_the_delay() {
        let capped = Backoff::exponential(ms(100), 2).with_cap(ms(500));
        assert_eq!(
            schedule(&capped, 5),
            [ms(100), ms(200), ms(400), ms(500), ms(500)]
        );
    }

    #[test]
    fn growth_can_stop_and_never_overflows() {
        let held = Backoff::exponential(ms(1), 2).with_growth_stopping_after(2);
        assert_eq!(schedule(&held, 4), [ms(1), ms(2), ms(4), ms(4)]);
        let unbounded = Backoff::exponential(Duration::from_secs(1), 2);
        assert_eq!(unbounded.delay(64), Duration::MAX);
        assert_eq!(unbounded.delay(u32::MAX), Duration::MAX);
        assert_eq!(Backoff::constant(Duration::ZERO).delay(9), Duration::ZERO);
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        let spread = Backoff::exponential(ms(1_000), 2).with_jitter(Jitter::Spread(0.25));
        assert_eq!(spread.delay_drawn(0, || 0.0), ms(750));
        assert_eq!(spread.delay_drawn(0, || 0.5), ms(1_000));
        assert!(spread.delay_drawn(0, || 0.999_999) < ms(1_250));
        let full = Backoff::exponential(ms(1_000), 2).with_jitter(Jitter::Full);
        assert_eq!(full.delay_drawn(1, || 0.0), Duration::ZERO);
        assert_eq!(full.delay_drawn(1, || 0.25), ms(500));
        let none = Backoff::exponential(ms(1_000), 2);
        assert_eq!(none.delay_drawn(1, || unreachable!()), ms(2_000));
        for retry in 0..20 {
            let delay = spread.with_cap(ms(4_000)).delay(retry);
            let unjittered = ms(1_000 << retry.min(2));
            assert!(delay >= unjittered.mul_f64(0.75) && delay < unjittered.mul_f64(1.25));
            assert!(full.delay(retry) < ms(1_000 << retry));
        }
    }

    #[test]
    fn a_seeded_source_repeats_the_schedule() {
        let backoff = Backoff::exponential(ms(1_000), 2).with_jitter(Jitter::Spread(0.25));
        let seeded = |seed: u64| {
            let mut state = seed;
            (0..5)
                .map(|retry| {
                    backoff.delay_drawn(retry, || {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1);
                        (state >> 11) as f64 / (1u64 << 53) as f64
                    })
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(seeded(7), seeded(7));
        assert_ne!(seeded(7), seeded(8));
    }

    #[test]
    fn attempts_run_out() {
        let three = Backoff::exponential(ms(10), 2).with_attempts(Attempts::Limited(3));
        assert_eq!(three.next(1, Duration::ZERO, true), Ok(ms(10)));
        assert_eq!(three.next(2, Duration::ZERO, true), Ok(ms(20)));
        assert_eq!(three.next(3, Duration::ZERO, true), Err(Stop::Exhausted));
        let forever = Backoff::constant(ms(1));
        assert_eq!(forever.next(u32::MAX, Duration::MAX, true), Ok(ms(1)));
    }

    #[test]
    fn the_deadline_stops_retries() {
        let backoff = Backoff::constant(ms(10)).with_deadline(ms(100));
        assert_eq!(backoff.next(5, ms(99), true), Ok(ms(10)));
        assert_eq!(backoff.next(5, ms(100), true), Err(Stop::PastDeadline));
    }

    #[test]
    fn an_error_that_does_not_retry_stops_at_once() {
        let backoff = Backoff::constant(ms(10));
        assert_eq!(
            backoff.next(1, Duration::ZERO, false),
            Err(Stop::NotRetryable)
        );
    }

    /// `retry` against a scripted attempt: the results it returns in turn.
    async fn run(
        backoff: Backoff,
        script: &[Result<u32, &'static str>],
    ) -> (Result<u32, &'static str>, u32, Vec<(u32, Duration)>) {
        let calls = std::cell::Cell::new(0);
        let mut heard = Vec::new();
        let result = backoff
            .retry(
                || {
                    let n = calls.get();
                    calls.set(n + 1);
                    std::future::ready(script[n])
                },
                |err: &&str| *err != "fatal",
                |_, failures, wait| heard.push((failures, wait)),
            )
            .await;
        (result, calls.get() as u32, heard)
    }

    #[tokio::test]
    async fn retry_runs_until_success_and_reports_each_retry() {
        let backoff = Backoff::exponential(ms(2), 2).with_attempts(Attempts::Limited(5));
        let started = Instant::now();
        let (result, calls, heard) = run(backoff, &[Err("busy"), Err("busy"), Ok(42)]).await;
        assert_eq!((result, calls), (Ok(42), 3));
        assert_eq!(heard, [(1, ms(2)), (2, ms(4))]);
        assert!(started.elapsed() >= ms(6));
    }

    #[tokio::test]
    async fn retry_stops_at_an_error_that_does_not_retry() {
        let backoff = Backoff::constant(ms(1));
        let (result, calls, heard) = run(backoff, &[Err("busy"), Err("fatal"), Ok(1)]).await;
        assert_eq!((result, calls, heard), (Err("fatal"), 2, vec![(1, ms(1))]));
    }

    #[tokio::test]
    async fn retry_returns_the_last_error_when_attempts_run_out() {
        let backoff = Backoff::constant(Duration::ZERO).with_attempts(Attempts::Limited(2));
        let (result, calls, heard) = run(backoff, &[Err("busy"), Err("again"), Ok(1)]).await;
        assert_eq!((result, calls), (Err("again"), 2));
        assert_eq!(heard, [(1, Duration::ZERO)]);
    }

    /// A loop that runs until stopped waits by its failures in a row,
    /// whatever the attempts, and starts over after a success.
    #[test]
    fn an_endless_loop_waits_by_its_failures_in_a_row() {
        let mut retries = Backoff::exponential(ms(100), 2)
            .with_attempts(Attempts::Limited(1))
            .start();
        let waits: Vec<_> = (0..3).map(|_| retries.wait_after_failure()).collect();
        assert_eq!(waits, [ms(100), ms(200), ms(400)]);
        retries.succeeded();
        assert_eq!(retries.wait_after_failure(), ms(100));
    }

    #[tokio::test]
    async fn retries_stop_at_the_deadline() {
        let backoff = Backoff::constant(ms(5)).with_deadline(ms(20));
        let started = Instant::now();
        let mut retries = backoff.start();
        let stop = loop {
            match retries.failed(true) {
                Ok(wait) => tokio::time::sleep(wait).await,
                Err(stop) => break stop,
            }
        };
        assert_eq!(stop, Stop::PastDeadline);
        assert!(started.elapsed() >= ms(20));
        // Sleeps of 5 ms: at least one retry, at most the four that fit.
        assert!((2..=5).contains(&retries.failures()));
    }
}
