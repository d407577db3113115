//! Cron schedules, in the standard five-field syntax Kubernetes CronJobs use
//! (`minute hour day-of-month month day-of-week`): `*`, `?`, numbers, ranges (`1-5`),
//! steps (`*/15`, `10-50/20`, `5/10` = `5-max/10`), lists (`1,3,5-7`), month and weekday
//! names (`jan`…`dec`, `sun`…`sat`, any case), and the descriptors `@yearly`
//! (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`) and `@hourly`.
//!
//! As in the cron library Kubernetes uses: when both day fields are restricted, a day
//! matches if either does; a field starting with `*` or `?` (without a step above 1)
//! counts as unrestricted. Times are whole minutes in UTC. `TZ=`/`CRON_TZ=` prefixes and
//! `@every` are refused (Kubernetes refuses the prefixes in new CronJobs too).

use std::fmt;

/// Why a schedule could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(pub String);

/// A parsed schedule: the set of values each field matches.
#[derive(Clone, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// Day of month or day of week unrestricted (`*`/`?`).
    any_day: bool,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("minutes", &format_args!("{:#x}", self.minutes))
            .field("hours", &format_args!("{:#x}", self.hours))
            .field("days", &format_args!("{:#x}", self.days))
            .field("months", &format_args!("{:#x}", self.months))
            .field("weekdays", &format_args!("{:#x}", self.weekdays))
            .field("any_day", &self.any_day)
            .finish()
    }
}

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const WEEKDAYS: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

fn value(s: &str, b: &Bounds) -> Result<u32, ScheduleError> {
    let lower = s.to_ascii_lowercase();
    if let Some(i) = b.names.iter().position(|n| *n == lower) {
        return Ok(b.min + u32::try_from(i).unwrap_or(0));
    }
    let n: u32 = s
        .parse()
        .map_err(|_| ScheduleError(format!("failed to parse int from {s}")))?;
    if n < b.min || n > b.max {
        return Err(ScheduleError(format!(
            "value {n} out of range [{}, {}]",
            b.min, b.max
        )));
    }
    Ok(n)
}

/// The bits a field sets, and whether it is unrestricted.
fn field(expr: &str, b: &Bounds) -> Result<(u64, bool), ScheduleError> {
    let mut bits = 0u64;
    let mut star = false;
    for part in expr.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| ScheduleError(format!("failed to parse int from {s}")))?;
                if step == 0 {
                    return Err(ScheduleError(format!(
                        "step of range should be a positive number: {part}"
                    )));
                }
                (r, Some(step))
            }
            None => (part, None),
        };
        let (start, end, is_star) = if range == "*" || range == "?" {
            (b.min, b.max, true)
        } else if let Some((lo, hi)) = range.split_once('-') {
            (value(lo, b)?, value(hi, b)?, false)
        } else {
            let v = value(range, b)?;
            // `N/step` runs from N to the end.
            (v, if step.is_some() { b.max } else { v }, false)
        };
        if start > end {
            return Err(ScheduleError(format!(
                "beginning of range ({start}) beyond end of range ({end}): {part}"
            )));
        }
        let step = step.unwrap_or(1);
        if is_star && step == 1 {
            star = true;
        }
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

impl Schedule {
    /// Parses a schedule (see the [module docs](self)).
    ///
    /// # Errors
    /// A field is malformed or out of range, there are not exactly five fields, or an
    /// unsupported descriptor or time-zone prefix is used.
    pub fn parse(spec: &str) -> Result<Schedule, ScheduleError> {
        let spec = spec.trim();
        if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
            return Err(ScheduleError(
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead".into(),
            ));
        }
        let expanded = match spec.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s if s.starts_with('@') => {
                return Err(ScheduleError(format!("unrecognized descriptor: {spec}")))
            }
            _ => spec,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(ScheduleError(format!(
                "expected exactly 5 fields, found {}: {spec}",
                fields.len()
            )));
        }
        let (minutes, _) = field(fields[0], &MINUTES)?;
        let (hours, _) = field(fields[1], &HOURS)?;
        let (days, any_dom) = field(fields[2], &DAYS)?;
        let (months, _) = field(fields[3], &MONTHS)?;
        let (weekdays, any_dow) = field(fields[4], &WEEKDAYS)?;
        // Each mask fits its type: the bounds above keep the bits in range.
        Ok(Schedule {
            minutes,
            hours: u32::try_from(hours).unwrap_or(0),
            days: u32::try_from(days).unwrap_or(0),
            months: u16::try_from(months).unwrap_or(0),
            weekdays: u8::try_from(weekdays).unwrap_or(0),
            any_day: any_dom || any_dow,
        })
    }

    fn day_matches(&self, c: &Civil) -> bool {
        let dom = self.days & (1 << c.day) != 0;
        let dow = self.weekdays & (1 << c.weekday) != 0;
        if self.any_day {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// Whether the minute `m` (minutes since the Unix epoch, UTC) is a scheduled time.
    pub fn matches(&self, m: i64) -> bool {
        let c = Civil::of_minute(m);
        self.months & (1 << c.month) != 0
            && self.day_matches(&c)
            && self.hours & (1 << c.hour) != 0
            && self.minutes & (1 << c.minute) != 0
    }

    /// The first scheduled minute strictly after minute `after`, within five years (a
    /// schedule such as `0 0 30 2 *` never fires).
    pub fn next(&self, after: i64) -> Option<i64> {
        let limit = after.saturating_add(SEARCH_MINUTES);
        let mut m = after.saturating_add(1);
        while m <= limit {
            let c = Civil::of_minute(m);
            if self.months & (1 << c.month) == 0 {
                m = c.month_start_minute_after();
            } else if !self.day_matches(&c) {
                m = c.day_start_minute() + MINUTES_PER_DAY;
            } else if self.hours & (1 << c.hour) == 0 {
                m = c.hour_start_minute() + 60;
            } else if self.minutes & (1 << c.minute) == 0 {
                m += 1;
            } else {
                return Some(m);
            }
        }
        None
    }

    /// The last scheduled minute at or before minute `at`, within five years.
    pub fn prev(&self, at: i64) -> Option<i64> {
        let limit = at.saturating_sub(SEARCH_MINUTES);
        let mut m = at;
        while m >= limit {
            let c = Civil::of_minute(m);
            if self.months & (1 << c.month) == 0 {
                m = c.month_start_minute() - 1;
            } else if !self.day_matches(&c) {
                m = c.day_start_minute() - 1;
            } else if self.hours & (1 << c.hour) == 0 {
                m = c.hour_start_minute() - 1;
            } else if self.minutes & (1 << c.minute) == 0 {
                m -= 1;
            } else {
                return Some(m);
            }
        }
        None
    }
}

const MINUTES_PER_DAY: i64 = 24 * 60;
/// How far [`Schedule::next`] and [`Schedule::prev`] look (five years, as robfig/cron).
const SEARCH_MINUTES: i64 = 5 * 366 * MINUTES_PER_DAY;

/// A UTC civil time of one minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    /// 0 = Sunday.
    pub weekday: u32,
    days: i64,
}

/// Days since 1970-01-01 of a proleptic Gregorian date (`month` 1-12).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

impl Civil {
    pub(crate) fn of_minute(m: i64) -> Civil {
        let days = m.div_euclid(MINUTES_PER_DAY);
        let in_day = m.rem_euclid(MINUTES_PER_DAY);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month: u32::try_from(month).unwrap_or(1),
            day: u32::try_from(day).unwrap_or(1),
            hour: u32::try_from(in_day / 60).unwrap_or(0),
            minute: u32::try_from(in_day % 60).unwrap_or(0),
            weekday: u32::try_from((days + 4).rem_euclid(7)).unwrap_or(0),
            days,
        }
    }

    fn day_start_minute(&self) -> i64 {
        self.days * MINUTES_PER_DAY
    }

    fn hour_start_minute(&self) -> i64 {
        self.day_start_minute() + i64::from(self.hour) * 60
    }

    fn month_start_minute(&self) -> i64 {
        days_from_civil(self.year, self.month, 1) * MINUTES_PER_DAY
    }

    fn month_start_minute_after(&self) -> i64 {
        let (y, m) = if self.month == 12 {
            (self.year + 1, 1)
        } else {
            (self.year, self.month + 1)
        };
        days_from_civil(y, m, 1) * MINUTES_PER_DAY
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::tz::TimeZone;
    use k8s_openapi::jiff::Timestamp;
    use proptest::prelude::*;

    /// Minute of a UTC civil time.
    fn at(y: i64, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        days_from_civil(y, mo, d) * MINUTES_PER_DAY + i64::from(h) * 60 + i64::from(mi)
    }

    #[test]
    fn fields_ranges_steps_lists_and_names() {
        let s = Schedule::parse("*/15 9-17 * jan,JUL mon-fri").unwrap();
        assert_eq!(s.minutes, 1 | 1 << 15 | 1 << 30 | 1 << 45);
        assert_eq!(s.hours, 0b11_1111_1110_0000_0000);
        assert_eq!(s.months, 1 << 1 | 1 << 7);
        assert_eq!(s.weekdays, 0b011_1110);
        assert!(s.any_day, "day of month is *");
        let s = Schedule::parse("5/20 0 1,15 * *").unwrap();
        assert_eq!(s.minutes, 1 << 5 | 1 << 25 | 1 << 45);
        let s = Schedule::parse("10-50/20 0 ? * *").unwrap();
        assert_eq!(s.minutes, 1 << 10 | 1 << 30 | 1 << 50);
        assert_eq!(
            Schedule::parse("@daily").unwrap(),
            Schedule::parse("0 0 * * *").unwrap()
        );
        assert_eq!(
            Schedule::parse("@annually").unwrap(),
            Schedule::parse("0 0 1 1 *").unwrap()
        );
        assert_eq!(
            Schedule::parse("@weekly").unwrap(),
            Schedule::parse("0 0 * * sun").unwrap()
        );
        assert_eq!(
            Schedule::parse("@HOURLY").unwrap(),
            Schedule::parse("0 * * * *").unwrap()
        );
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 7",
            "5-1 * * * *",
            "*/0 * * * *",
            "x * * * *",
            "@every 1h",
            "@sometimes",
            "TZ=UTC * * * * *",
            "CRON_TZ=Europe/Paris 0 * * * *",
            "* * * foo *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn restricted_day_fields_match_either() {
        // The 13th, or any Friday.
        let s = Schedule::parse("0 0 13 * 5").unwrap();
        assert!(s.matches(at(2026, 11, 13, 0, 0)), "a Friday the 13th");
        assert!(s.matches(at(2026, 11, 20, 0, 0)), "a Friday");
        assert!(s.matches(at(2026, 1, 13, 0, 0)), "a Tuesday the 13th");
        assert!(!s.matches(at(2026, 11, 19, 0, 0)));
        // A stepped field is a restriction: days 1, 3, 5, … or any Monday.
        let s = Schedule::parse("0 0 */2 * 1").unwrap();
        assert!(s.matches(at(2026, 11, 2, 0, 0)), "a Monday, an even day");
        assert!(s.matches(at(2026, 11, 3, 0, 0)), "day 3 is in */2");
    }

    #[test]
    fn next_and_prev_find_the_scheduled_minutes() {
        let s = Schedule::parse("30 2 29 2 *").unwrap();
        let from = at(2026, 3, 1, 0, 0);
        assert_eq!(s.next(from), Some(at(2028, 2, 29, 2, 30)));
        assert_eq!(s.prev(from), Some(at(2024, 2, 29, 2, 30)));
        assert_eq!(Schedule::parse("0 0 30 2 *").unwrap().next(from), None);
        let every = Schedule::parse("* * * * *").unwrap();
        assert_eq!(every.next(from), Some(from + 1), "strictly after");
        assert_eq!(every.prev(from), Some(from), "at or before");
        let s = Schedule::parse("0 0 1 1 *").unwrap();
        assert_eq!(s.next(at(2026, 12, 31, 23, 59)), Some(at(2027, 1, 1, 0, 0)));
    }

    proptest! {
        #[test]
        fn civil_time_agrees_with_jiff(m in -1_000_000_000i64..1_000_000_000i64) {
            let c = Civil::of_minute(m);
            let z = Timestamp::from_second(m * 60).unwrap().to_zoned(TimeZone::UTC);
            prop_assert_eq!(c.year, i64::from(z.year()));
            prop_assert_eq!(c.month, u32::try_from(z.month()).unwrap());
            prop_assert_eq!(c.day, u32::try_from(z.day()).unwrap());
            prop_assert_eq!(c.hour, u32::try_from(z.hour()).unwrap());
            prop_assert_eq!(c.minute, u32::try_from(z.minute()).unwrap());
            prop_assert_eq!(c.weekday, u32::try_from(z.weekday().to_sunday_zero_offset()).unwrap());
            prop_assert_eq!(days_from_civil(c.year, c.month, c.day), c.days);
        }

        #[test]
        fn a_list_of_values_parses_to_exactly_those_values(
            v in proptest::collection::btree_set(0u32..60, 1..20),
            ranges in proptest::collection::vec((0u32..60, 0u32..60, 1u32..10), 0..3),
        ) {
            let mut parts: Vec<String> = v.iter().map(u32::to_string).collect();
            let mut want: u64 = v.iter().fold(0, |acc, x| acc | 1 << x);
            for (a, b, step) in ranges {
                let (lo, hi) = (a.min(b), a.max(b));
                parts.push(format!("{lo}-{hi}/{step}"));
                let mut x = lo;
                while x <= hi { want |= 1 << x; x += step; }
            }
            let s = Schedule::parse(&format!("{} * * * *", parts.join(","))).unwrap();
            prop_assert_eq!(s.minutes, want);
        }

        #[test]
        fn next_is_the_first_match_after_and_prev_undoes_it(
            minute in "(\\*|\\*/[1-9]|[0-5]?[0-9])",
            hour in "(\\*|\\*/[1-5]|1?[0-9]|2[0-3])",
            dom in "(\\*|[1-9]|1[0-9]|2[0-8])",
            dow in "(\\*|[0-6]|mon-fri)",
            from in 0i64..100_000_000i64,
        ) {
            let s = Schedule::parse(&format!("{minute} {hour} {dom} * {dow}")).unwrap();
            let n = s.next(from).expect("such a schedule fires within five years");
            prop_assert!(n > from && s.matches(n));
            // No match in between (checked minute by minute over the first two days).
            for m in (from + 1)..n.min(from + 2 * MINUTES_PER_DAY) {
                prop_assert!(!s.matches(m), "{} matched before {}", m, n);
            }
            prop_assert_eq!(s.prev(n), Some(n));
            if let Some(p) = s.prev(n - 1) {
                prop_assert!(p <= from && s.matches(p));
                prop_assert_eq!(s.next(p), Some(n));
            }
        }
    }
}
