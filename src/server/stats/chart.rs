//! The dashboard's chart: opens and clicks per hour as inline SVG, drawn on
//! the server so the page needs no script and no front-end build.
//!
//! In the first hours after a send (when people watch most) the hourly
//! series would be one or two points: the chart then draws minutes. A
//! bucket without events is a gap: lines join only neighbouring buckets
//! that have some (never a slope from 300 down to the empty bucket next
//! to it), and every bucket with events is drawn as a dot, so a lone one
//! shows too.

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
/// While all data lies within this many hours, the chart draws minutes.
pub(crate) const MINUTE_VIEW_HOURS: i64 = 6;
/// Dots are drawn while the series is this short (beyond, they would merge).
const MAX_DOTS: usize = 120;

/// The resolution of one chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolution {
    Hour,
    Minute,
}

impl Resolution {
    fn step(self) -> Duration {
        match self {
            Resolution::Hour => Duration::hours(1),
            Resolution::Minute => Duration::minutes(1),
        }
    }

    fn max_points(self) -> usize {
        match self {
            Resolution::Hour => MAX_HOURS,
            Resolution::Minute => MINUTE_VIEW_HOURS as usize * 60,
        }
    }

    fn label(self, at: NaiveDateTime) -> String {
        match self {
            Resolution::Hour => at.format("%Y-%m-%d %H:00").to_string(),
            Resolution::Minute => at.format("%Y-%m-%d %H:%M").to_string(),
        }
    }
}

/// Minutes when every hour with data lies within [`MINUTE_VIEW_HOURS`] (and
/// minutes were rolled up), hours otherwise.
pub(crate) fn resolution(hours: &[HourStats], minutes: &[HourStats]) -> Resolution {
    match (hours.first(), hours.last()) {
        (Some(first), Some(last))
            if !minutes.is_empty()
                && last.hour - first.hour < Duration::hours(MINUTE_VIEW_HOURS) =>
        {
            Resolution::Minute
        }
        _ => Resolution::Hour,
    }
}

/// Buckets from the first to the last with data, gaps filled with zeros; at
/// most the last `max_points` of them, so one stray far-off timestamp cannot
/// make the page huge.
fn contiguous_by(hours: &[HourStats], resolution: Resolution) -> Vec<(NaiveDateTime, u64, u64)> {
    let (Some(first), Some(last)) = (hours.first(), hours.last()) else {
        return Vec::new();
    };
    let step = resolution.step();
    let window_start = last.hour - step * (resolution.max_points() as i32 - 1);
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
        at += step;
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

fn dots(points: &[(f64, f64)], colour: &str) -> String {
    let mut out = String::new();
    if points.len() <= MAX_DOTS {
        for (x, y) in points {
            let _ = write!(
                out,
                r#"<circle class="dot" cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"/>"#
            );
        }
    }
    out
}

/// The SVG for the human opens and clicks of `buckets` (sorted by time, one
/// per hour or per minute as `resolution` says).
pub(crate) fn svg(buckets: &[HourStats], resolution: Resolution) -> String {
    let series = contiguous_by(buckets, resolution);
    let per = match resolution {
        Resolution::Hour => "hour",
        Resolution::Minute => "minute",
    };
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-resolution="{per}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="Opens and clicks per {per}">"#
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
    // One point sits in the middle rather than on the axis.
    let (step, offset) = if series.len() > 1 {
        (plot_w / (series.len() - 1) as f64, 0.0)
    } else {
        (0.0, plot_w / 2.0)
    };
    let point = |i: usize, v: u64| {
        (
            LEFT + offset + step * i as f64,
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
    draw_axes(&mut out, base, max);
    let (first, last) = axis_ends(&series, resolution);
    // Each end carries its time (`data-at`, RFC 3339) for the page's script,
    // which writes it in the viewer's time zone; without script it stays UTC.
    let _ = write!(
        out,
        r##"<text class="at" x="{LEFT}" y="{}" font-size="11" fill="#444" data-at="{}">{} UTC</text><text class="at" x="{}" y="{}" font-size="11" text-anchor="end" fill="#444" data-at="{}">{} UTC</text>"##,
        HEIGHT - 8.0,
        rfc3339(first),
        resolution.label(first),
        WIDTH - 8.0,
        HEIGHT - 8.0,
        rfc3339(last),
        resolution.label(last)
    );
    let open_counts: Vec<u64> = series.iter().map(|s| s.1).collect();
    let click_counts: Vec<u64> = series.iter().map(|s| s.2).collect();
    out.push_str(&with_gaps(&opens, &open_counts, "#2b6cb0"));
    out.push_str(&with_gaps(&clicks, &click_counts, "#dd6b20"));
    out.push_str("</svg>");
    out
}

/// One series: a line over each run of neighbouring buckets with events
/// (`counts`), nothing over buckets without, and a dot on each bucket with
/// events (while dots fit; a lone bucket gets its dot regardless, or it
/// would not show at all).
fn with_gaps(points: &[(f64, f64)], counts: &[u64], colour: &str) -> String {
    let dotted = points.len() <= MAX_DOTS;
    let mut out = String::new();
    let mut run: Vec<(f64, f64)> = Vec::new();
    let end_run = |run: &mut Vec<(f64, f64)>, out: &mut String| {
        if run.len() > 1 {
            out.push_str(&polyline(run, colour));
        } else if !dotted {
            out.push_str(&dots(run, colour));
        }
        run.clear();
    };
    for (point, count) in points.iter().zip(counts) {
        if *count > 0 {
            run.push(*point);
        } else {
            end_run(&mut run, &mut out);
        }
    }
    end_run(&mut run, &mut out);
    if dotted {
        let with_events: Vec<(f64, f64)> = points
            .iter()
            .zip(counts)
            .filter(|(_, count)| **count > 0)
            .map(|(point, _)| *point)
            .collect();
        out.push_str(&dots(&with_events, colour));
    }
    out
}

/// The labels at the two ends of the time axis. A lone bucket is drawn in
/// the middle, so the axis runs one step either side of it: labelling both
/// ends with the bucket itself would show the same minute twice.
/// How far the cumulative chart reaches after the first event: the shape
/// of a send is in its first two days.
pub(crate) const CUMULATIVE_HOURS: i64 = 48;

/// The widths the cumulative chart's time axis snaps to, in hours.
const CUMULATIVE_SPANS: [i64; 6] = [1, 2, 6, 12, 24, CUMULATIVE_HOURS];

/// The first event's bucket (the chart's zero), if any.
pub(crate) fn first_bucket(hours: &[HourStats], minutes: &[HourStats]) -> Option<NaiveDateTime> {
    let first_hour = hours.first().map(|h| h.hour);
    let first_minute = minutes.first().map(|m| m.hour);
    match (first_minute, first_hour) {
        // Minutes within the first hour say when, to the minute.
        (Some(m), Some(h)) if m >= h && m < h + Duration::hours(1) => Some(m),
        (_, h) => h.or(first_minute),
    }
}

/// Cumulative opens and clicks (humans) over the first
/// [`CUMULATIVE_HOURS`] after the first event, as step lines that only
/// rise: minutes where they were rolled up, hours after. The time axis is
/// hours since the first event (its time is printed beside, in the
/// viewer's zone); it spans the data, snapped to 1, 2, 6, 12, 24 or 48 h.
pub(crate) fn cumulative_svg(hours: &[HourStats], minutes: &[HourStats]) -> String {
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart cumulative" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="Cumulative opens and clicks over the first {CUMULATIVE_HOURS} hours">"#
    );
    let Some(start) = first_bucket(hours, minutes) else {
        out.push_str(
            r##"<text x="20" y="40" fill="#666">No opens or clicks rolled up yet.</text></svg>"##,
        );
        return out;
    };
    let end = start + Duration::hours(CUMULATIVE_HOURS);
    let steps = cumulative_steps(hours, minutes, start, end);
    let last = steps.last().map_or(start, |s| s.0);
    let reach = (last - start).num_minutes() + 1;
    let span = CUMULATIVE_SPANS
        .iter()
        .copied()
        .find(|h| h * 60 >= reach)
        .unwrap_or(CUMULATIVE_HOURS);
    let total = steps.last().map_or((0, 0), |s| (s.1, s.2));
    let max = total.0.max(total.1).max(1) as f64;
    let plot_w = WIDTH - LEFT - 8.0;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let base = TOP + plot_h;
    let x = |at: NaiveDateTime| {
        LEFT + plot_w * ((at - start).num_seconds() as f64 / (span * 3600) as f64).min(1.0)
    };
    let y = |v: u64| TOP + plot_h * (1.0 - v as f64 / max);
    draw_axes(&mut out, base, max);
    for tick in 0..=4 {
        let minutes_in = span * 60 * tick / 4;
        let label = if span * 60 < 4 * 60 || minutes_in % 60 != 0 {
            format!("+{}:{:02}", minutes_in / 60, minutes_in % 60)
        } else {
            format!("+{}h", minutes_in / 60)
        };
        let tx = x(start + Duration::minutes(minutes_in));
        let anchor = match tick {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            out,
            r##"<text class="tick" x="{tx:.1}" y="{}" font-size="11" text-anchor="{anchor}" fill="#444">{label}</text>"##,
            HEIGHT - 8.0
        );
    }
    for (pick, colour) in [(0usize, "#2b6cb0"), (1usize, "#dd6b20")] {
        let mut points = vec![(x(start), y(0))];
        let mut level = 0;
        for (at, opens, clicks) in &steps {
            let value = if pick == 0 { *opens } else { *clicks };
            points.push((x(*at), y(level)));
            points.push((x(*at), y(value)));
            level = value;
        }
        points.push((x(start + Duration::hours(span)), y(level)));
        out.push_str(&polyline(&points, colour));
    }
    let _ = write!(
        out,
        r##"<text x="{}" y="{}" font-size="12" text-anchor="end" fill="#2b6cb0">{} opens</text><text x="{}" y="{}" font-size="12" text-anchor="end" fill="#dd6b20">{} clicks</text>"##,
        WIDTH - 12.0,
        TOP + 14.0,
        total.0,
        WIDTH - 12.0,
        TOP + 30.0,
        total.1
    );
    out.push_str("</svg>");
    out
}

/// (bucket start, opens so far, clicks so far) at each bucket with data
/// before `end`: minutes while they are rolled up, then hours after the
/// last minute's hour (no event counted twice).
fn cumulative_steps(
    hours: &[HourStats],
    minutes: &[HourStats],
    start: NaiveDateTime,
    end: NaiveDateTime,
) -> Vec<(NaiveDateTime, u64, u64)> {
    let minutes_until = minutes
        .last()
        .map(|m| m.hour + Duration::minutes(1))
        .filter(|_| {
            minutes
                .first()
                .is_some_and(|m| m.hour <= start + Duration::hours(1))
        });
    let hours_from = minutes_until.map(|until| {
        // The first whole hour the minutes do not cover.
        let hour = until - Duration::seconds(1);
        hour.date()
            .and_hms_opt(chrono::Timelike::hour(&hour), 0, 0)
            .map_or(until, |h| h + Duration::hours(1))
    });
    let mut buckets: Vec<&HourStats> = Vec::new();
    if hours_from.is_some() {
        buckets.extend(minutes.iter().filter(|m| m.hour >= start && m.hour < end));
    }
    buckets.extend(
        hours
            .iter()
            .filter(|h| hours_from.is_none_or(|from| h.hour >= from))
            .filter(|h| h.hour < end),
    );
    let (mut opens, mut clicks) = (0, 0);
    buckets
        .into_iter()
        .filter(|b| b.opens + b.clicks > 0)
        .map(|b| {
            opens += b.opens;
            clicks += b.clicks;
            (b.hour.max(start), opens, clicks)
        })
        .collect()
}

/// The times at the two ends of the time axis (UTC); `series` is not empty
/// (the callers draw "No opens or clicks" instead).
fn axis_ends(
    series: &[(NaiveDateTime, u64, u64)],
    resolution: Resolution,
) -> (NaiveDateTime, NaiveDateTime) {
    let (Some(first), Some(last)) = (series.first(), series.last()) else {
        return (NaiveDateTime::default(), NaiveDateTime::default());
    };
    if series.len() == 1 {
        (first.0 - resolution.step(), last.0 + resolution.step())
    } else {
        (first.0, last.0)
    }
}

/// A UTC time as the page's script reads it (`2026-11-22T09:02:00Z`).
fn rfc3339(at: NaiveDateTime) -> String {
    at.and_utc().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The two axes, with the top value `max` and 0 on the vertical one; `base`
/// is the plot's bottom edge. Both charts draw them alike.
fn draw_axes(out: &mut String, base: f64, max: f64) {
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
    fn the_cumulative_series_only_rises_and_counts_each_event_once() {
        // Minutes of hours 9 and 10, hours 9 to 12: minutes first, then
        // the hours after the last minute's hour.
        let minutes = [minute(9, 5, 3, 0), minute(9, 40, 2, 1), minute(10, 2, 1, 1)];
        let hours = [
            hour(9, 5, 1),
            hour(10, 1, 1),
            hour(11, 4, 2),
            hour(12, 0, 0),
        ];
        let start = first_bucket(&hours, &minutes).unwrap();
        assert_eq!(start, minute(9, 5, 0, 0).hour);
        let steps = cumulative_steps(&hours, &minutes, start, start + Duration::hours(48));
        let totals: Vec<(u64, u64)> = steps.iter().map(|s| (s.1, s.2)).collect();
        assert_eq!(totals, [(3, 0), (5, 1), (6, 2), (10, 4)]);
        let svg = cumulative_svg(&hours, &minutes);
        assert!(
            svg.contains(">10 opens<") && svg.contains(">4 clicks<"),
            "{svg}"
        );
        assert!(svg.contains(">+2:00<"), "two hours of data: {svg}");
        // Beyond 48 hours nothing is added.
        let late = [hour(9, 1, 0), hour(9 + 2, 1, 0)];
        let far = HourStats {
            hour: late[0].hour + Duration::hours(49),
            opens: 7,
            ..HourStats::default()
        };
        let with_far = [late[0].clone(), late[1].clone(), far];
        assert!(cumulative_svg(&with_far, &[]).contains(">2 opens<"));
    }

    #[test]
    fn an_empty_bucket_is_a_gap_not_a_slope_to_zero() {
        // 300 opens at 09:00 and 09:01, none at 09:02, 5 at 09:03 and 09:04.
        let minutes = [
            minute(9, 0, 300, 2),
            minute(9, 1, 300, 2),
            minute(9, 3, 5, 2),
            minute(9, 4, 5, 2),
        ];
        let svg = svg(&minutes, Resolution::Minute);
        // Two lines per series, none through the empty minute.
        assert_eq!(svg.matches("<polyline").count(), 4, "{svg}");
        let base = HEIGHT - BOTTOM;
        for line in svg.split("<polyline").skip(1) {
            let points = line.split("points=\"").nth(1).unwrap();
            let points = &points[..points.find('"').unwrap()];
            for point in points.split(' ') {
                let y: f64 = point.split(',').nth(1).unwrap().parse().unwrap();
                assert!(y < base, "a line reaches the zero line: {points}");
            }
        }
        assert_eq!(svg.matches("<circle").count(), 8, "{svg}");
    }

    #[test]
    fn gaps_are_filled_with_zero_hours() {
        let series = contiguous_by(&[hour(1, 5, 1), hour(4, 2, 2)], Resolution::Hour);
        let counts: Vec<(u64, u64)> = series.iter().map(|s| (s.1, s.2)).collect();
        assert_eq!(counts, [(5, 1), (0, 0), (0, 0), (2, 2)]);
    }

    #[test]
    fn a_stray_old_hour_does_not_stretch_the_series() {
        let mut old = hour(1, 1, 1);
        old.hour -= Duration::days(3650);
        let series = contiguous_by(&[old, hour(4, 2, 2)], Resolution::Hour);
        assert_eq!(series.len(), MAX_HOURS);
        assert_eq!(series.last().map(|s| (s.1, s.2)), Some((2, 2)));
    }

    #[test]
    fn the_svg_has_two_series_scaled_to_the_maximum() {
        let svg = svg(&[hour(1, 10, 3), hour(2, 4, 1)], Resolution::Hour);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">10</text>"), "{svg}");
        // The maximum sits at the top of the plot area.
        assert!(svg.contains(&format!("{LEFT:.1},{TOP:.1}")), "{svg}");
        assert!(!svg.contains("No opens"));
        assert!(super::svg(&[], Resolution::Hour).contains("No opens"));
    }

    fn minute(h: u32, m: u32, opens: u64, clicks: u64) -> HourStats {
        let mut bucket = hour(h, opens, clicks);
        bucket.hour += Duration::minutes(i64::from(m));
        bucket
    }

    #[test]
    fn one_hour_of_data_is_drawn_as_dots_per_minute() {
        let hours = [hour(9, 12, 4)];
        let minutes = [minute(9, 2, 5, 1), minute(9, 7, 7, 3)];
        assert_eq!(resolution(&hours, &minutes), Resolution::Minute);
        let svg = svg(&minutes, Resolution::Minute);
        assert!(svg.contains(r#"data-resolution="minute""#), "{svg}");
        // Six minutes from 09:02 to 09:07, events in two of them, two
        // series: four dots and no line across the four empty minutes.
        assert_eq!(svg.matches("<circle").count(), 4, "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 0, "{svg}");
        assert!(
            svg.contains("2026-11-22 09:02 UTC") && svg.contains("2026-11-22 09:07 UTC"),
            "{svg}"
        );
        // Each label carries its time for the page's script (the viewer's
        // time zone).
        assert!(
            svg.contains(r#"data-at="2026-11-22T09:02:00Z">2026-11-22 09:02 UTC<"#)
                && svg.contains(r#"data-at="2026-11-22T09:07:00Z">2026-11-22 09:07 UTC<"#),
            "{svg}"
        );
    }

    /// The time axis labels of `svg`: the two `<text>` elements that hold a
    /// date.
    fn axis_labels(svg: &str) -> Vec<String> {
        svg.split("<text")
            .filter_map(|t| {
                t.split_once('>')
                    .and_then(|(_, rest)| rest.split_once("</text>"))
            })
            .map(|(label, _)| label.trim_end_matches(" UTC").to_owned())
            .filter(|label| label.starts_with("2026-"))
            .collect()
    }

    #[test]
    fn a_lone_minute_is_labelled_with_distinct_ends_around_it() {
        // Right after a send with no human open yet: one minute, all zero.
        let svg = svg(&[minute(9, 2, 0, 0)], Resolution::Minute);
        assert_eq!(
            axis_labels(&svg),
            ["2026-11-22 09:01", "2026-11-22 09:03"],
            "{svg}"
        );
        let svg = super::svg(&[hour(9, 3, 1)], Resolution::Hour);
        assert_eq!(
            axis_labels(&svg),
            ["2026-11-22 08:00", "2026-11-22 10:00"],
            "{svg}"
        );
        let svg = super::svg(
            &[minute(9, 2, 1, 0), minute(9, 3, 1, 1)],
            Resolution::Minute,
        );
        assert_eq!(
            axis_labels(&svg),
            ["2026-11-22 09:02", "2026-11-22 09:03"],
            "{svg}"
        );
    }

    #[test]
    fn a_single_point_is_visible() {
        let svg = svg(&[hour(9, 3, 1)], Resolution::Hour);
        assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
    }

    #[test]
    fn data_spread_over_many_hours_is_drawn_per_hour() {
        let hours = [hour(1, 1, 1), hour(9, 1, 1)];
        assert_eq!(resolution(&hours, &[minute(1, 0, 1, 1)]), Resolution::Hour);
        assert_eq!(resolution(&hours[..1], &[]), Resolution::Hour);
    }
}
