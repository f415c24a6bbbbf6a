//! Times as people write them on the command line and read them in a report: UTC,
//! `YYYY-MM-DDTHH:MM:SS[.mmm][Z]` or Unix milliseconds; durations as `5m`, `1s`, `250ms`.

/// Days since 1970-01-01 for a civil date (Howard Hinnant's algorithm); `y` within
/// ±[`MAX_YEAR`] (no overflow: the timestamps' range of years is narrower).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The years a time typed on the command line may have: more than the ±292 million years
/// an i64 of milliseconds spans (checked again there), few enough for the date arithmetic.
const MAX_YEAR: i64 = 1_000_000_000;

/// What files' events span, for a refusal that names it: "the files' events run from A to
/// B", or that they hold no event with a timestamp (`replay` and `report` alike).
pub fn files_range(first_ms: Option<i64>, last_ms: Option<i64>) -> String {
    match (first_ms, last_ms) {
        (Some(a), Some(b)) => format!(
            "the files' events run from {} to {}",
            format_ms(a),
            format_ms(b)
        ),
        _ => "the files hold no event with a timestamp".into(),
    }
}

/// `2026-11-30 08:54:31.250` (UTC), for any i64 (the years of i64::MIN and i64::MAX are
/// -292275055 and 292278994).
pub fn format_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// `08:54:31.250`: the time of day of [`format_ms`] (its date has more or fewer than 4
/// digits of year at the ends of i64: cut it at the space, not at a byte).
pub fn format_clock(ms: i64) -> String {
    let rem = ms.rem_euclid(86_400_000);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// `2026-11-30` for a day number.
pub fn format_day(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Unix ms, or an ISO-8601 UTC time.
pub fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let bad =
        || format!("not a time: {s:?} (use Unix milliseconds or YYYY-MM-DDTHH:MM:SS[.mmm]Z, UTC)");
    let t = s.trim_end_matches('Z');
    let (date, clock) = t.split_once(['T', ' ']).unwrap_or((t, "00:00:00"));
    // A year before 0 (as `format_ms` writes the far past) has a leading `-`.
    let (sign, date) = match date.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, date),
    };
    let mut dp: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if dp.iter().any(|&p| p < 0) {
        return Err(bad());
    }
    if let Some(y) = dp.first_mut() {
        *y *= sign;
    }
    let (clock, frac) = clock.split_once('.').unwrap_or((clock, "0"));
    let cp: Vec<i64> = clock
        .split(':')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if dp.len() != 3 || cp.is_empty() || cp.len() > 3 {
        return Err(bad());
    }
    if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let ms_frac: i64 = format!("{frac:0<3}")[..3].parse().map_err(|_| bad())?;
    let (h, mi, se) = (cp[0], *cp.get(1).unwrap_or(&0), *cp.get(2).unwrap_or(&0));
    if !(1..=12).contains(&dp[1])
        || !(1..=31).contains(&dp[2])
        || !(0..=23).contains(&h)
        || !(0..=59).contains(&mi)
        || !(0..=60).contains(&se)
        || !(-MAX_YEAR..=MAX_YEAR).contains(&dp[0])
    {
        return Err(bad());
    }
    // Checked: a year past the range of i64 milliseconds (about ±292 million) is refused,
    // not wrapped.
    // In i128, then checked into i64: the seconds of i64::MIN's day times 1000 are below
    // i64::MIN before its milliseconds bring them back in.
    let ms = (i128::from(days_from_civil(dp[0], dp[1], dp[2])) * 86_400
        + i128::from(h * 3600 + mi * 60 + se))
        * 1000
        + i128::from(ms_frac);
    i64::try_from(ms).map_err(|_| {
        format!(
            "{} (out of the range of Unix milliseconds: {} .. {})",
            bad(),
            format_ms(i64::MIN),
            format_ms(i64::MAX)
        )
    })
}

/// `5m`, `300s`, `1s`, `250ms`, `1h` in milliseconds.
pub fn parse_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("not a duration: {s:?} (use e.g. 5m, 1s, 250ms)");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = s.split_at(split);
    let n: i64 = n.parse().map_err(|_| bad())?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    match n.checked_mul(unit_ms) {
        Some(ms) if ms > 0 => Ok(ms),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_parses() {
        let ms = parse_time("2026-11-30T08:54:31.250Z").unwrap();
        assert_eq!(format_ms(ms), "2026-11-30 08:54:31.250");
        assert_eq!(parse_time("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(parse_time("2000-03-01 00:00:00").unwrap(), 951_868_800_000);
        assert_eq!(parse_time("1796028608044").unwrap(), 1_796_028_608_044);
        assert_eq!(format_day(ms.div_euclid(86_400_000)), "2026-11-30");
        assert!(parse_time("yesterday").is_err());
        assert_eq!(parse_duration("5m").unwrap(), 300_000);
        assert_eq!(parse_duration("250ms").unwrap(), 250);
        assert!(parse_duration("5").is_err() && parse_duration("0s").is_err());
    }

    /// The ends of i64: formatted (the years of i64::MIN and MAX), parsed back, one step
    /// past them refused; no overflow anywhere (a debug build panics on one).
    #[test]
    fn the_ends_of_i64_format_and_parse_and_beyond_is_refused() {
        assert_eq!(format_ms(i64::MIN), "-292275055-05-16 16:47:04.192");
        assert_eq!(format_ms(i64::MAX), "292278994-08-17 07:12:55.807");
        assert_eq!(format_clock(i64::MIN), "16:47:04.192");
        assert_eq!(format_clock(-1), "23:59:59.999");
        assert_eq!(
            format_day(i64::MIN.div_euclid(86_400_000)),
            "-292275055-05-16"
        );
        for ms in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX] {
            let text = format_ms(ms).replacen(' ', "T", 1);
            // The date's leading `-` is a negative year, not a separator: only what
            // follows the year is split.
            assert_eq!(parse_time(&format!("{text}Z")), Ok(ms), "{text}");
        }
        for bad in [
            "292278994-08-17T07:12:55.808Z",
            "-292275055-05-16T16:47:04.191Z",
            "99999999999999999-01-01T00:00:00Z",
            "-9223372036854775808-01-01",
            "2026-01-01T-5:00:00Z",
            "2026-01-01T00:-1:00Z",
            "2026-01-01T00:00:00.\u{e9}\u{e9}Z",
            "2026-01-01T00:00:00.Z",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("9223372036854775807ms"), Ok(i64::MAX));
        for bad in [
            "9223372036854775807s",
            "2562047788015216h",
            "9223372036854775808ms",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
