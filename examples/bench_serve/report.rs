//! What `bench_serve` prints: the tables of its measurements.

use super::*;

/// The redirect with `--compare-in-flight` lookups in flight against `--in-flight`.
pub(crate) fn report_in_flight(args: &Args, in_flight: usize, base: &Figure, other: &Figure) {
    println!(
        "redirect, {in_flight} lookups in flight        {:>9.0} req/s      p99 {:>7.2} ms   {:.3} statements/hit",
        other.per_second,
        other.p99 * 1e3,
        other.statements_per_hit
    );
    println!(
        "{in_flight} / {} lookups in flight, req/s     {:.2}   p99 {:.2}",
        args.in_flight,
        other.per_second / base.per_second,
        other.p99 / base.p99
    );
    println!(
        "  CPU per redirect (µs): database {:.1} against {:.1}, server {:.1} against {:.1}",
        other.database_cpu_per_hit * 1e6,
        base.database_cpu_per_hit * 1e6,
        other.server_cpu_per_hit * 1e6,
        base.server_cpu_per_hit * 1e6
    );
}

pub(crate) fn report(
    ceiling: &Figure,
    redirect: &Figure,
    pixel: &Figure,
    health: &Figure,
    rounds: usize,
) {
    let ms = |s: f64| s * 1e3;
    println!("\nmedians of {rounds} rounds");
    println!(
        "ceiling: the lookup by sysbench        {:>9.0} queries/s  p99 {:>7.2} ms",
        ceiling.per_second,
        ms(ceiling.p99)
    );
    for (name, f) in [
        ("redirect GET /c/{token}", redirect),
        ("pixel GET /o/{token}.gif", pixel),
        ("GET /healthz", health),
    ] {
        println!(
            "{name:<38} {:>9.0} req/s      p99 {:>7.2} ms   {:.3} statements/hit",
            f.per_second,
            ms(f.p99),
            f.statements_per_hit
        );
    }
    println!(
        "\nredirect req/s / ceiling queries/s   {:.2}   (aim >= 1.0)",
        redirect.per_second / ceiling.per_second
    );
    println!(
        "redirect p99 / ceiling p99           {:.2}   (aim <= 1.5)",
        redirect.p99 / ceiling.p99
    );
    println!(
        "pixel req/s / healthz req/s          {:.2}   (aim >= 0.7)",
        pixel.per_second / health.per_second
    );
    println!(
        "statements per click                 {:.3}  (aim <= 0.6)",
        redirect.statements_per_hit
    );
    println!(
        "statements per open                  {:.3}  (aim <= 0.12)",
        pixel.statements_per_hit
    );
    report_cpu(ceiling, redirect, pixel, health);
}

/// Where each hit's CPU went, and the two capacity ratios that hold when
/// the database and the server have machines of their own (here they share
/// two cores with each other and with the load generators, so the req/s
/// ratios above also measure who got the CPU).
pub(crate) fn report_cpu(ceiling: &Figure, redirect: &Figure, pixel: &Figure, health: &Figure) {
    let us = |s: f64| s * 1e6;
    println!(
        "\nCPU per hit (µs)                       database   server   (in the load, after it)   events replayed after the load"
    );
    println!(
        "ceiling: the lookup by sysbench        {:>8.1}        -",
        us(ceiling.database_cpu_per_hit)
    );
    for (name, f) in [
        ("redirect (lookup, journal, replay)", redirect),
        ("pixel (journal, replay)", pixel),
        ("healthz", health),
    ] {
        println!(
            "{name:<38} {:>8.1} {:>8.1}   ({:>5.1}, {:>5.1})             {:.1} s",
            us(f.database_cpu_per_hit),
            us(f.server_cpu_per_hit),
            us(f.server_cpu_in_load_per_hit),
            us(f.server_cpu_per_hit - f.server_cpu_in_load_per_hit),
            f.replayed_after
        );
    }
    println!(
        "\nredirects / ceiling lookups per database CPU second   {:.2}   (aim >= 1.0 where the database is the limit)",
        ceiling.database_cpu_per_hit / redirect.database_cpu_per_hit
    );
    println!(
        "pixels / healthz per server CPU second                {:.2}   (aim >= 0.7 where the server is the limit)",
        health.server_cpu_per_hit / pixel.server_cpu_per_hit
    );
    report_machine_cpu(ceiling, redirect, pixel, health);
}

/// The CPU every process on this machine spent per hit, and the req/s
/// ratios that CPU allows where all of them share the machine's cores
/// (as wrk, the server and MariaDB do here): a ratio of the CPU each hit
/// costs the whole machine. The last line bounds the redirect's ratio
/// from above: a redirect that cost the generator and the server no more
/// than `/healthz` does, and MariaDB what it costs now.
pub(crate) fn report_machine_cpu(
    ceiling: &Figure,
    redirect: &Figure,
    pixel: &Figure,
    health: &Figure,
) {
    let us = |s: f64| s * 1e6;
    println!(
        "\nCPU per hit on this machine (µs)       generator   server   mariadbd (all threads)   in all"
    );
    for (name, f) in [
        ("ceiling (sysbench)", ceiling),
        ("redirect (wrk)", redirect),
        ("pixel (wrk)", pixel),
        ("healthz (wrk)", health),
    ] {
        println!(
            "{name:<38} {:>9.1} {:>8.1} {:>12.1}             {:>8.1}",
            us(f.generator_cpu_per_hit),
            us(f.server_cpu_per_hit),
            us(f.mariadbd_cpu_per_hit),
            us(f.machine_cpu_per_hit())
        );
    }
    println!(
        "\nwhere the machine's CPU is the limit: redirect / ceiling {:.2}, pixel / healthz {:.2}",
        ceiling.machine_cpu_per_hit() / redirect.machine_cpu_per_hit(),
        health.machine_cpu_per_hit() / pixel.machine_cpu_per_hit()
    );
    let leanest_redirect =
        health.generator_cpu_per_hit + health.server_cpu_per_hit + redirect.mariadbd_cpu_per_hit;
    println!(
        "  and were a redirect's HTTP work as cheap as /healthz's: redirect / ceiling {:.2}",
        ceiling.machine_cpu_per_hit() / leanest_redirect
    );
}

pub(crate) fn report_webhooks(
    batch: usize,
    rounds: &[(Figure, Drain)],
    off: &Figure,
    seconds: u64,
) {
    let on = median(&rounds.iter().map(|(f, _)| *f).collect::<Vec<_>>());
    let per_round: Vec<String> = rounds
        .iter()
        .map(|(f, _)| format!("{:.2}", f.per_second / off.per_second))
        .collect();
    let middle = |field: fn(&Drain) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(|(_, d)| field(d)).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "\nwebhooks on, {batch} event(s) per request: redirect {:.0} req/s, p99 {:.2} ms, {:.3} statements/hit",
        on.per_second,
        on.p99 * 1e3,
        on.statements_per_hit
    );
    println!(
        "  redirect webhooks on / off, req/s  {:.2}   (aim >= 0.95; rounds {})",
        on.per_second / off.per_second,
        per_round.join(", ")
    );
    println!(
        "  events sent during the load        {:.0}/s; queued at its end {:.0}; drained in {:.1} s{}",
        middle(|d| d.during_load as f64) / seconds as f64,
        middle(|d| d.queued_at_end as f64),
        middle(|d| d.seconds),
        if rounds.iter().all(|(_, d)| d.drained) {
            ""
        } else {
            " (some rounds did not drain within the limit)"
        }
    );
}
