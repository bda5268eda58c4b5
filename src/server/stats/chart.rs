//! The dashboard's chart: opens and clicks per hour as inline SVG, drawn on
//! the server so the page needs no script and no front-end build.

use crate::store::stats::HourStats;
use chrono::{Duration, NaiveDateTime};
use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 48.0;
const BOTTOM: f64 = 28.0;
const TOP: f64 = 12.0;
/// At most this many hours are drawn (the most recent ones): two weeks.
const MAX_HOURS: usize = 24 * 14;

/// Hours from the first to the last with data, gaps filled with zeros; at
/// most the last [`MAX_HOURS`], so one stray far-off timestamp cannot make
/// the page huge.
fn contiguous(hours: &[HourStats]) -> Vec<(NaiveDateTime, u64, u64)> {
    let (Some(first), Some(last)) = (hours.first(), hours.last()) else {
        return Vec::new();
    };
    let window_start = last.hour - Duration::hours(MAX_HOURS as i64 - 1);
    let start = first.hour.max(window_start);
    let mut at = start;
    let mut source = hours.iter().filter(move |h| h.hour >= start).peekable();
    let mut out = Vec::new();
    while at <= last.hour {
        let (mut opens, mut clicks) = (0, 0);
        while let Some(h) = source.next_if(|h| h.hour <= at) {
            opens += h.opens;
            clicks += h.clicks;
        }
        out.push((at, opens, clicks));
        at += Duration::hours(1);
    }
    out
}

fn polyline(points: &[(f64, f64)], colour: &str) -> String {
    let mut d = String::new();
    for (x, y) in points {
        let _ = write!(d, "{x:.1},{y:.1} ");
    }
    format!(
        r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
        d.trim_end()
    )
}

/// The SVG for the human opens and clicks of `hours` (sorted by hour).
pub fn svg(hours: &[HourStats]) -> String {
    let series = contiguous(hours);
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="Opens and clicks per hour">"#
    );
    if series.is_empty() {
        out.push_str(
            r##"<text x="20" y="40" fill="#666">No opens or clicks rolled up yet.</text></svg>"##,
        );
        return out;
    }
    let max = series
        .iter()
        .map(|(_, o, c)| (*o).max(*c))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let plot_w = WIDTH - LEFT - 8.0;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let step = if series.len() > 1 {
        plot_w / (series.len() - 1) as f64
    } else {
        0.0
    };
    let point = |i: usize, v: u64| {
        (
            LEFT + step * i as f64,
            TOP + plot_h * (1.0 - v as f64 / max),
        )
    };
    let opens: Vec<_> = series
        .iter()
        .enumerate()
        .map(|(i, s)| point(i, s.1))
        .collect();
    let clicks: Vec<_> = series
        .iter()
        .enumerate()
        .map(|(i, s)| point(i, s.2))
        .collect();
    let base = TOP + plot_h;
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{base}" x2="{}" y2="{base}" stroke="#999"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}" stroke="#999"/>"##,
        WIDTH - 8.0
    );
    let _ = write!(
        out,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="end" fill="#444">{}</text><text x="{}" y="{base}" font-size="11" text-anchor="end" fill="#444">0</text>"##,
        LEFT - 4.0,
        TOP + 10.0,
        max as u64,
        LEFT - 4.0
    );
    let first = series
        .first()
        .map(|s| s.0.format("%Y-%m-%d %H:00").to_string());
    let last = series
        .last()
        .map(|s| s.0.format("%Y-%m-%d %H:00").to_string());
    let _ = write!(
        out,
        r##"<text x="{LEFT}" y="{}" font-size="11" fill="#444">{}</text><text x="{}" y="{}" font-size="11" text-anchor="end" fill="#444">{} UTC</text>"##,
        HEIGHT - 8.0,
        first.unwrap_or_default(),
        WIDTH - 8.0,
        HEIGHT - 8.0,
        last.unwrap_or_default()
    );
    out.push_str(&polyline(&opens, "#2b6cb0"));
    out.push_str(&polyline(&clicks, "#dd6b20"));
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hour(h: u32, opens: u64, clicks: u64) -> HourStats {
        HourStats {
            hour: chrono::NaiveDate::from_ymd_opt(2026, 11, 22)
                .unwrap()
                .and_hms_opt(h, 0, 0)
                .unwrap(),
            opens,
            clicks,
            ..HourStats::default()
        }
    }

    #[test]
    fn gaps_are_filled_with_zero_hours() {
        let series = contiguous(&[hour(1, 5, 1), hour(4, 2, 2)]);
        let counts: Vec<(u64, u64)> = series.iter().map(|s| (s.1, s.2)).collect();
        assert_eq!(counts, [(5, 1), (0, 0), (0, 0), (2, 2)]);
    }

    #[test]
    fn a_stray_old_hour_does_not_stretch_the_series() {
        let mut old = hour(1, 1, 1);
        old.hour -= Duration::days(3650);
        let series = contiguous(&[old, hour(4, 2, 2)]);
        assert_eq!(series.len(), MAX_HOURS);
        assert_eq!(series.last().map(|s| (s.1, s.2)), Some((2, 2)));
    }

    #[test]
    fn the_svg_has_two_series_scaled_to_the_maximum() {
        let svg = svg(&[hour(1, 10, 3), hour(2, 4, 1)]);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">10</text>"), "{svg}");
        // The maximum sits at the top of the plot area.
        assert!(svg.contains(&format!("{LEFT:.1},{TOP:.1}")), "{svg}");
        assert!(!svg.contains("No opens"));
        assert!(super::svg(&[]).contains("No opens"));
    }
}
