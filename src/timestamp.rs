//! UTC timestamps written digit by digit, for the two places that write one
//! per event: the journal line (RFC 3339) and the replay's insert (a SQL
//! datetime literal); and the journal line's time read back the same way
//! ([`parse_rfc3339`]). `core::fmt` (through chrono's `Display` or `write!`)
//! was a large share of what an open costs the server (`bench_serve
//! --callgrind-route pixel` shows it).
//! Both forms come from one fixed-width layout, and chrono writes what that
//! layout cannot hold. The writer keeps its last second and the reader its
//! last day, each per thread ([`LastPerThread`]).

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};
use std::cell::Cell;

/// `at` in RFC 3339 with nanoseconds (`2026-11-22T10:00:00.123456789Z`),
/// handed to `use_text`.
pub(crate) fn with_rfc3339<R>(at: &DateTime<Utc>, use_text: impl FnOnce(&str) -> R) -> R {
    if let Some(digits) = digits(at) {
        let mut text = [b'Z'; 30];
        text[..29].copy_from_slice(&digits);
        if let Ok(text) = std::str::from_utf8(&text) {
            return use_text(text);
        }
    }
    use_text(&at.to_rfc3339_opts(SecondsFormat::Nanos, true))
}

/// `at` as a SQL datetime literal's text with microseconds (`2026-11-22
/// 10:00:00.123456`, the date first and a space before the time), handed
/// to `use_text`.
pub(crate) fn with_sql_datetime<R>(at: &DateTime<Utc>, use_text: impl FnOnce(&str) -> R) -> R {
    if let Some(mut digits) = digits(at) {
        digits[10] = b' ';
        if let Ok(text) = std::str::from_utf8(&digits[..26]) {
            return use_text(text);
        }
    }
    use_text(&at.format("%Y-%m-%d %H:%M:%S%.6f").to_string())
}

/// The time [`with_rfc3339`] wrote, read back: its fixed-width form digit
/// by digit, anything else (a year past 9999, a leap second, the shorter
/// forms of older journal lines) by chrono. `None` if it is no RFC 3339 time.
pub(crate) fn parse_rfc3339(text: &str) -> Option<DateTime<Utc>> {
    fixed_width(text.as_bytes()).or_else(|| text.parse().ok())
}

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` as a time, or `None` if `text` is not
/// one in exactly that layout.
fn fixed_width(text: &[u8]) -> Option<DateTime<Utc>> {
    let [y0, y1, y2, y3, b'-', mo0, mo1, b'-', d0, d1, b'T', h0, h1, b':', mi0, mi1, b':', s0, s1, b'.', nanos @ .., b'Z'] =
        text
    else {
        return None;
    };
    let nanos: &[u8; 9] = nanos.try_into().ok()?;
    // The date of the last line read on this thread is kept: a segment's
    // lines are of one day, and building a date from its digits is most
    // of reading the time.
    thread_local! {
        static DAY: LastPerThread<[u8; 10], chrono::NaiveDate> = const { LastPerThread::new() };
    }
    let digits = [*y0, *y1, *y2, *y3, b'-', *mo0, *mo1, b'-', *d0, *d1];
    let date = DAY.with(|day| {
        day.get_or(digits, || {
            chrono::NaiveDate::from_ymd_opt(
                i32::try_from(number(&[*y0, *y1, *y2, *y3])?).ok()?,
                number(&[*mo0, *mo1])?,
                number(&[*d0, *d1])?,
            )
        })
    })?;
    let time = date.and_hms_nano_opt(
        number(&[*h0, *h1])?,
        number(&[*mi0, *mi1])?,
        number(&[*s0, *s1])?,
        number(nanos)?,
    )?;
    Some(time.and_utc())
}

/// The last value made on a thread, with the key it was made for: a cache
/// of one, for values that repeat run after run (the second of a busy
/// server's events, the day of a journal segment's lines). Held in a
/// `thread_local!`, so reading it takes no lock.
struct LastPerThread<K, V>(Cell<Option<(K, V)>>);

impl<K: Copy + PartialEq, V: Copy> LastPerThread<K, V> {
    const fn new() -> Self {
        LastPerThread(Cell::new(None))
    }

    /// The value kept for `key`, else the one `make` gives (then kept in
    /// place of the last); `None`, and nothing kept, when `make` gives none.
    #[inline]
    fn get_or(&self, key: K, make: impl FnOnce() -> Option<V>) -> Option<V> {
        match self.0.get() {
            Some((seen, value)) if seen == key => Some(value),
            _ => {
                let value = make()?;
                self.0.set(Some((key, value)));
                Some(value)
            }
        }
    }
}

/// Decimal digits as a number; `None` if one is not a digit.
fn number(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |value, digit| {
        let digit = digit.checked_sub(b'0').filter(|d| *d < 10)?;
        Some(value * 10 + u32::from(digit))
    })
}

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnn`: a date and time with nanoseconds, the
/// layout both forms start from.
type Digits = [u8; 29];

/// `at` as [`Digits`], or `None` where fixed widths cannot hold it: years
/// outside 0..=9999 and leap seconds (chrono's nanosecond >= 10^9).
///
/// The date and time up to the second are kept per thread and written anew
/// only when the second changes: the events of a busy server fall in the
/// same second, and chrono's date fields and the twelve divisions of the
/// digits need not be made again for each event.
fn digits(at: &DateTime<Utc>) -> Option<Digits> {
    thread_local! {
        static SECOND: LastPerThread<SecondKey, SecondDigits> = const { LastPerThread::new() };
    }
    let nanos = at.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    let naive = at.naive_utc();
    let key = (naive.date(), naive.time().num_seconds_from_midnight());
    let second = SECOND.with(|cached| cached.get_or(key, || second_digits(at)))?;
    let mut out = *b"0000-00-00T00:00:00.000000000";
    out[..19].copy_from_slice(&second);
    put(&mut out[20..29], nanos);
    Some(out)
}

/// Which second [`SecondDigits`] were written for.
type SecondKey = (chrono::NaiveDate, u32);

/// `YYYY-MM-DDTHH:MM:SS`, the part of [`Digits`] before the nanoseconds.
type SecondDigits = [u8; 19];

/// `at`'s date and time to the second, or `None` for a year outside 0..=9999.
fn second_digits(at: &DateTime<Utc>) -> Option<SecondDigits> {
    let year = u32::try_from(at.year()).ok().filter(|year| *year <= 9999)?;
    let mut out = *b"0000-00-00T00:00:00";
    put(&mut out[0..4], year);
    put(&mut out[5..7], at.month());
    put(&mut out[8..10], at.day());
    put(&mut out[11..13], at.hour());
    put(&mut out[14..16], at.minute());
    put(&mut out[17..19], at.second());
    Some(out)
}

/// `value`'s last `to.len()` decimal digits into `to`, zero-padded.
fn put(to: &mut [u8], mut value: u32) {
    for digit in to.iter_mut().rev() {
        // `value % 10` is below 10: the cast cannot truncate.
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    /// `parse_rfc3339` as it was before it kept the day: the fixed layout's
    /// date built from its digits every time, else chrono.
    fn read_before(text: &str) -> Option<DateTime<Utc>> {
        let fixed = || {
            let b = text.as_bytes();
            if b.len() != 30 || b[29] != b'Z' {
                return None;
            }
            let n = |r: std::ops::Range<usize>| number(&b[r]);
            let layout = [
                (4, b'-'),
                (7, b'-'),
                (10, b'T'),
                (13, b':'),
                (16, b':'),
                (19, b'.'),
            ];
            if layout.iter().any(|&(at, c)| b[at] != c) {
                return None;
            }
            let date = chrono::NaiveDate::from_ymd_opt(
                i32::try_from(n(0..4)?).ok()?,
                n(5..7)?,
                n(8..10)?,
            )?;
            Some(
                date.and_hms_nano_opt(n(11..13)?, n(14..16)?, n(17..19)?, n(20..29)?)?
                    .and_utc(),
            )
        };
        fixed().or_else(|| text.parse().ok())
    }

    fn text(digits: &[u8]) -> &str {
        std::str::from_utf8(digits).unwrap()
    }

    /// `at` written in both forms is `rfc3339` and `sql`.
    fn assert_forms(at: &DateTime<Utc>, rfc3339: &str, sql: &str) {
        assert_eq!(with_rfc3339(at, str::to_owned), rfc3339);
        assert_eq!(with_sql_datetime(at, str::to_owned), sql);
    }

    #[test]
    fn digits_match_chrono_for_every_part() {
        let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()
            + chrono::Duration::nanoseconds(6_007);
        assert_eq!(text(&digits(&at).unwrap()), "2026-01-02T03:04:05.000006007");
        assert_forms(
            &at,
            "2026-01-02T03:04:05.000006007Z",
            "2026-01-02 03:04:05.000006",
        );
    }

    #[test]
    fn years_past_four_digits_and_leap_seconds_are_left_to_chrono() {
        let far = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(digits(&far), None);
        assert_forms(
            &far,
            "+10000-01-01T00:00:00.000000000Z",
            "+10000-01-01 00:00:00.000000",
        );
        let leap = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 1_500_000_000))
            .unwrap()
            .and_utc();
        assert_eq!(digits(&leap), None);
    }

    #[test]
    fn what_is_written_reads_back_and_what_is_not_a_time_does_not() {
        let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()
            + chrono::Duration::nanoseconds(6_007);
        assert_eq!(parse_rfc3339("2026-01-02T03:04:05.000006007Z"), Some(at));
        // Older journal lines' shorter forms and other offsets, by chrono.
        let whole = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        assert_eq!(parse_rfc3339("2026-11-22T10:00:00Z"), Some(whole));
        assert_eq!(parse_rfc3339("2026-11-22T12:00:00+02:00"), Some(whole));
        let far = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(parse_rfc3339(&with_rfc3339(&far, str::to_owned)), Some(far));
        for bad in [
            "",
            "2026-02-30T00:00:00.000000000Z",
            "2026-01-02T24:00:00.000000000Z",
            "2026-01-02T03:04:05.00000600xZ",
            "2026-01-02T03:04:05.000006007",
            "２026-01-02T03:04:05.000006007Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn every_time_written_reads_back_exactly(seconds in -62_000_000_000i64..300_000_000_000, nanos in 0u32..1_000_000_000) {
            let at = DateTime::from_timestamp(seconds, nanos).unwrap();
            prop_assert_eq!(parse_rfc3339(&with_rfc3339(&at, str::to_owned)), Some(at));
        }

        /// Texts of times in turn, the day read once and reused, and texts
        /// near them with a digit changed: read as chrono reads them (or
        /// refused where chrono refuses the fixed layout's date).
        #[test]
        fn times_read_in_turn_are_chronos(
            times in proptest::collection::vec((0i64..253_402_300_799, 0i64..3, 0u32..1_000_000_000, 0usize..29, 0u8..10), 1..40),
        ) {
            for (seconds, step, nanos, at, digit) in times {
                for seconds in [seconds, seconds + step * 86_400, seconds] {
                    let at_time = DateTime::from_timestamp(seconds, nanos).unwrap();
                    let text = at_time.to_rfc3339_opts(SecondsFormat::Nanos, true);
                    prop_assert_eq!(parse_rfc3339(&text), Some(at_time));
                    let mut changed = text.into_bytes();
                    if changed[at].is_ascii_digit() {
                        changed[at] = b'0' + digit;
                    }
                    let changed = String::from_utf8(changed).unwrap();
                    prop_assert_eq!(parse_rfc3339(&changed), read_before(&changed), "{}", changed);
                }
            }
        }

        /// Times in and around one second, in any order, as the per-thread
        /// second is reused and replaced: each written as chrono writes it.
        #[test]
        fn digits_of_times_in_turn_are_chronos_own_format(
            times in proptest::collection::vec((0i64..253_402_300_799, 0i64..3, 0u32..1_000_000_000), 1..40),
        ) {
            for (seconds, step, nanos) in times {
                for seconds in [seconds, seconds + step, seconds] {
                    let at = DateTime::from_timestamp(seconds, nanos).unwrap();
                    let expected = at.format("%Y-%m-%dT%H:%M:%S%.9f").to_string();
                    let written = digits(&at).unwrap();
                    prop_assert_eq!(text(&written), expected.as_str());
                }
            }
        }

        #[test]
        fn digits_are_chronos_own_format(seconds in 0i64..253_402_300_799, nanos in 0u32..1_000_000_000) {
            let at = DateTime::from_timestamp(seconds, nanos).unwrap();
            let expected = at.format("%Y-%m-%dT%H:%M:%S%.9f").to_string();
            let written = digits(&at).unwrap();
            prop_assert_eq!(text(&written), expected.as_str());
        }
    }
}
