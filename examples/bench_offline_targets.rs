//! The memory every server spends holding the link templates of live
//! mailings for clicks while the database is away (docs/serve.md,
//! "Security", clicks without the database): 10,000 mailings × 50 links
//! (URLs of a typical newsletter's length), measured
//! as the growth of the process's resident memory while they are loaded
//! (Linux), and the time one lookup takes.
//!
//! `cargo run --release --example bench_offline_targets [-- MAILINGS LINKS]`

use linktrack::kind::LinkKind;
use linktrack::server::offline_targets::OfflineTargets;
use linktrack::store::link_templates::LinkTemplate;
use std::time::Instant;

/// The process's resident memory in bytes (Linux `/proc/self/statm`,
/// pages of 4 KiB), 0 where it cannot be read.
fn resident_bytes() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|text| text.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mailings: u32 = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let links: u32 = args.next().and_then(|n| n.parse().ok()).unwrap_or(50);
    let today = chrono::Utc::now().date_naive();
    let targets = OfflineTargets::new(usize::MAX);
    let before = resident_bytes();
    let mut id = 0u32;
    for mailing in 0..mailings {
        let page: Vec<LinkTemplate> = (0..links)
            .map(|position| {
                id += 1;
                LinkTemplate {
                    id,
                    mailing_id: format!("newsletter-2026-{mailing:05}"),
                    kind: LinkKind::Click,
                    position,
                    url: format!(
                        "https://shop.example.com/collections/winter/products/item-{position}\
                         ?utm_source=newsletter&utm_campaign=n{mailing}"
                    ),
                    first_day: today,
                }
            })
            .collect();
        targets.add(page, today);
    }
    let held = resident_bytes().saturating_sub(before);
    let count = targets.len();
    println!(
        "{mailings} mailings x {links} links: {count} templates held in {:.1} MiB ({} bytes each)",
        held as f64 / (1024.0 * 1024.0),
        held / count.max(1)
    );
    let started = Instant::now();
    let mut found = 0usize;
    for n in 0..1_000_000u32 {
        found += usize::from(targets.get(n % id + 1).is_some());
    }
    println!(
        "{found} lookups in {:?} ({:.0} ns each)",
        started.elapsed(),
        started.elapsed().as_nanos() as f64 / 1e6
    );
}
