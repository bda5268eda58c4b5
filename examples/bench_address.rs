//! The cost of an address's fingerprint (`AddressKey::fingerprint`:
//! normal form, then HMAC-SHA256), which a server takes for every letter
//! whose link it reads from the database and the replay again for its
//! privacy screen (docs/privacy.md). Natively, with whatever SHA
//! instructions the CPU has: callgrind cannot show that, because valgrind
//! hides SHA-NI and sha2 falls back to its portable code there (about
//! 6,800 instructions a digest, ten times the native cost).
//!
//! `cargo run --release --example bench_address [-- CALLS]`

use linktrack::address::{normalize, AddressKey};
use std::time::Instant;

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let key = AddressKey::new(&[7; 32]);
    let ascii: Vec<String> = (0..1024)
        .map(|n| format!("Reader.{n}+news@Example{}.com", n % 7))
        .collect();
    let unicode: Vec<String> = (0..1024)
        .map(|n| format!("zoë.{n}@Bücher{}.example", n % 7))
        .collect();
    type Step<'a> = &'a dyn Fn(&str) -> u64;
    let normal_length = |address: &str| normalize(address).len() as u64;
    let fingerprint = |address: &str| key.fingerprint(address);
    let rounds: [(&str, Step, &[String]); 4] = [
        ("normal form, ASCII address", &normal_length, &ascii),
        ("normal form, IDN address", &normal_length, &unicode),
        ("fingerprint, ASCII address", &fingerprint, &ascii),
        ("fingerprint, IDN address", &fingerprint, &unicode),
    ];
    for (name, step, addresses) in rounds {
        let started = Instant::now();
        let mut sink = 0u64;
        for n in 0..calls {
            sink = sink.wrapping_add(step(&addresses[n % addresses.len()]));
        }
        let took = started.elapsed();
        println!(
            "{name:<28} {:>8.0} ns per call ({calls} calls, checksum {sink:x})",
            took.as_nanos() as f64 / calls as f64
        );
    }
}
