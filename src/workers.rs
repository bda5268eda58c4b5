//! Background workers that live as long as their process: the rollup, the
//! webhook and AMQP senders, the endpoint registry and the health gauges of
//! `linktrack serve` (started by the server's `App::build`, stopped in
//! order by `App::run`), and the senders of
//! `linktrack webhooks replay`. Plumbing below everything that uses it.
//!
//! A worker is an async function that takes a [`Stopping`] and returns once
//! it has been asked to stop (finishing or abandoning its current unit of
//! work: whatever it does must be safe to interrupt, like a transaction).
//!
//! Workers that may fall behind under load and catch up later (the event
//! senders, and the journal's replay, which is not a worker but uses the
//! same runtime) run on a runtime of their own, one thread at the lowest CPU
//! priority ([`Workers::spawn_low_priority`]): when the machine is busy,
//! the request path's threads get the CPU first.

use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The signal a worker watches: stop at the next safe point.
#[derive(Debug, Clone)]
pub struct Stopping(watch::Receiver<bool>);

impl Stopping {
    /// Resolves once stopping was asked for (at once if it already was).
    pub async fn requested(&mut self) {
        // An error means the sender is gone: that is a stop too.
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }
}

/// The running workers, each with its name (for the logs).
pub struct Workers {
    stop: watch::Sender<bool>,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
    /// Started by the first low-priority worker; dropped after the workers.
    low_priority: Option<LowPriority>,
}

impl Default for Workers {
    fn default() -> Self {
        Workers::new()
    }
}

impl Workers {
    pub fn new() -> Workers {
        Workers {
            stop: watch::channel(false).0,
            tasks: Vec::new(),
            low_priority: None,
        }
    }

    /// Start `work` on a task of its own, handing it the stop signal.
    pub fn spawn<F, Fut>(&mut self, name: &'static str, work: F)
    where
        F: FnOnce(Stopping) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let stopping = Stopping(self.stop.subscribe());
        tracing::debug!(worker = name, "worker started");
        self.tasks.push((name, tokio::spawn(work(stopping))));
    }

    /// Start `work` on the low-priority runtime (a thread at nice 19; see
    /// the module docs). When that runtime cannot be made, on a task of its
    /// own like [`Workers::spawn`].
    pub fn spawn_low_priority<F, Fut>(&mut self, name: &'static str, work: F)
    where
        F: FnOnce(Stopping) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(runtime) = self.low_priority_runtime() else {
            return self.spawn(name, work);
        };
        let stopping = Stopping(self.stop.subscribe());
        tracing::debug!(worker = name, "worker started at low priority");
        self.tasks.push((name, runtime.spawn(work(stopping))));
    }

    /// The low-priority runtime (started on first use), for work that is
    /// not a worker: the event replay. `None` when it cannot be made.
    /// It lives until these workers are dropped.
    pub fn low_priority_runtime(&mut self) -> Option<tokio::runtime::Handle> {
        if self.low_priority.is_none() {
            match LowPriority::start() {
                Ok(runtime) => self.low_priority = Some(runtime),
                Err(err) => {
                    tracing::warn!(%err, "no low-priority runtime; workers run with the rest")
                }
            }
        }
        self.low_priority.as_ref().map(|r| r.handle.clone())
    }

    /// Names of the running workers, in start order.
    pub fn names(&self) -> Vec<&'static str> {
        self.tasks.iter().map(|(name, _)| *name).collect()
    }

    /// Ask every worker to stop and wait for each, all within `deadline`;
    /// a worker still running then is aborted (and logged).
    pub async fn shutdown(self, deadline: Duration) {
        let _ = self.stop.send(true);
        let until = tokio::time::Instant::now() + deadline;
        for (name, mut task) in self.tasks {
            match tokio::time::timeout_at(until, &mut task).await {
                Ok(Ok(())) => tracing::debug!(worker = name, "worker stopped"),
                Ok(Err(err)) => tracing::error!(worker = name, %err, "worker failed"),
                Err(_) => {
                    tracing::warn!(worker = name, ?deadline, "worker did not stop in time");
                    task.abort();
                }
            }
        }
    }

    /// Handles that stop every worker at once, as a crash would.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn abort_handles(&self) -> Vec<tokio::task::AbortHandle> {
        self.tasks.iter().map(|(_, t)| t.abort_handle()).collect()
    }
}

/// A current-thread runtime on a thread of its own at nice 19. It runs until
/// dropped (then the thread ends, and with it whatever still runs there).
struct LowPriority {
    handle: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// The nice value of the low-priority thread: the lowest priority there is.
const LOW_PRIORITY_NICE: i32 = 19;

impl LowPriority {
    fn start() -> std::io::Result<LowPriority> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("low-priority".into())
            .spawn(move || {
                // The calling thread only: setpriority on a thread id.
                let me = rustix::thread::gettid();
                if let Err(err) = rustix::process::setpriority_process(Some(me), LOW_PRIORITY_NICE)
                {
                    tracing::warn!(%err, "could not lower the workers' thread priority");
                }
                runtime.block_on(async move {
                    let _ = stopped.await;
                });
            })?;
        Ok(LowPriority {
            handle,
            _stop: stop,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn shutdown_waits_for_a_worker_to_finish_its_stop() {
        let finished = Arc::new(AtomicBool::new(false));
        let mut workers = Workers::new();
        let seen = finished.clone();
        workers.spawn("test", move |mut stopping| async move {
            stopping.requested().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            seen.store(true, Ordering::SeqCst);
        });
        assert_eq!(workers.names(), ["test"]);
        workers.shutdown(Duration::from_secs(5)).await;
        assert!(finished.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_worker_that_ignores_the_stop_is_aborted_at_the_deadline() {
        let held = Arc::new(());
        let mut workers = Workers::new();
        let guard = held.clone();
        workers.spawn("stubborn", move |_| async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        workers.shutdown(Duration::from_millis(100)).await;
        // Aborting drops the task's future, and with it the guard.
        for _ in 0..100 {
            if Arc::strong_count(&held) == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(Arc::strong_count(&held), 1, "the worker was aborted");
    }

    #[tokio::test]
    async fn a_low_priority_worker_runs_niced_on_its_own_thread_and_stops() {
        let mut workers = Workers::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let caller = std::thread::current().id();
        workers.spawn_low_priority("low", move |mut stopping| async move {
            let nice = rustix::process::getpriority_process(None).ok();
            let _ = tx.send((std::thread::current().id(), nice));
            stopping.requested().await;
        });
        let (thread, nice) = rx.await.unwrap();
        assert_ne!(thread, caller);
        // getpriority(PRIO_PROCESS, 0) reads the calling thread on Linux.
        assert_eq!(nice, Some(LOW_PRIORITY_NICE));
        workers.shutdown(Duration::from_secs(5)).await;
    }
}
