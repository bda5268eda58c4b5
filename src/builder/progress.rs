//! The build's progress bar (recipients read) and the delivery counts shown
//! beside it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Show the delivery counts and rate beside the bar while letters go out.
pub(super) fn spawn_delivery_progress(
    bar: indicatif::ProgressBar,
    counters: Arc<crate::delivery::DeliveryCounters>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tick.tick().await;
            let delivered = counters.delivered.load(Ordering::Relaxed) as f64;
            let rate = delivered / started.elapsed().as_secs_f64().max(0.001);
            bar.set_message(format!("· {} · {rate:.0} messages/s", counters.line()));
        }
    })
}

pub(super) fn progress_bar(enabled: bool, total: Option<u64>) -> indicatif::ProgressBar {
    if !enabled {
        return indicatif::ProgressBar::hidden();
    }
    // indicatif draws nothing when stderr is not a terminal.
    let bar =
        indicatif::ProgressBar::with_draw_target(total, indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} recipients read ({eta} left) {msg}",
    ) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
