//! Resource quantities (`"100m"`, `"1.5Gi"`, `"2e3"`) read as integers, the way the
//! scheduler, LimitRanger and ResourceQuota need them: CPU in millicores, everything else in whole units (bytes, pods).
//!
//! The syntax is Kubernetes' `resource.Quantity`: an optionally signed decimal number, then
//! either nothing, a binary suffix (`Ki` `Mi` `Gi` `Ti` `Pi` `Ei`, powers of 1024), a decimal
//! SI suffix (`n` `u` `m` `k` `M` `G` `T` `P` `E`) or a decimal exponent (`e3`, `E-2`).
//! As Kubernetes does, a value that is not a whole number of the unit asked for is rounded
//! up (`"0.1m"` is 1 millicore, `"1.5"` bytes is 2), and values beyond `i64` saturate.

/// The largest mantissa we keep exactly; digits past it only decide rounding.
const MAX_MANTISSA: u128 = 10u128.pow(30);

/// A parsed quantity: `mantissa × 10^exp10 × 2^exp2` (negative quantities keep `negative`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
    /// Non-zero digits were dropped past [`MAX_MANTISSA`]'s precision (only matters for
    /// rounding up).
    inexact: bool,
}

fn parse(text: &str) -> Option<Parsed> {
    let text = text.trim();
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let mut mantissa: u128 = 0;
    let mut exp10: i32 = 0;
    let mut inexact = false;
    let mut after_point = false;
    for c in number.bytes() {
        if c == b'.' {
            after_point = true;
            continue;
        }
        let digit = u128::from(c - b'0');
        if mantissa < MAX_MANTISSA {
            mantissa = mantissa * 10 + digit;
            if after_point {
                exp10 -= 1;
            }
        } else {
            // Past our precision: an integer digit scales, a fractional one is dropped.
            if !after_point {
                exp10 += 1;
            }
            inexact |= digit != 0;
        }
    }
    let (extra10, exp2) = match suffix {
        "" => (0, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        s if s.starts_with(['e', 'E']) => {
            let digits = &s[1..];
            let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(digits);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (digits.parse::<i32>().ok()?.clamp(-1000, 1000), 0)
        }
        _ => return None,
    };
    Some(Parsed {
        negative,
        mantissa,
        exp10: exp10 + extra10,
        exp2,
        inexact,
    })
}

/// `quantity × 10^scale`, rounded up to an integer, saturating at `i64::MAX` (and at
/// `i64::MIN` for negative quantities). `None` if the text is not a quantity.
fn scaled(text: &str, scale: i32) -> Option<i64> {
    let p = parse(text)?;
    if p.mantissa == 0 && !p.inexact {
        return Some(0);
    }
    let exp10 = p.exp10 + scale;
    let saturated = if p.negative { i64::MIN } else { i64::MAX };
    // numerator = mantissa × 2^exp2 × 10^max(exp10, 0); denominator = 10^max(-exp10, 0).
    let mut numerator = p.mantissa;
    for _ in 0..p.exp2 {
        numerator = match numerator.checked_mul(2) {
            Some(n) => n,
            None => return Some(saturated),
        };
    }
    if exp10 > 0 {
        for _ in 0..exp10 {
            numerator = match numerator.checked_mul(10) {
                Some(n) => n,
                None => return Some(saturated),
            };
        }
    }
    let (mut value, remainder) = if exp10 < 0 {
        // 10^39 exceeds u128: anything divided by more is below one.
        if -exp10 > 38 {
            (0, numerator != 0)
        } else {
            let denominator = 10u128.pow(exp10.unsigned_abs());
            (numerator / denominator, numerator % denominator != 0)
        }
    } else {
        (numerator, false)
    };
    let fractional = remainder || p.inexact;
    if p.negative {
        // Rounding up a negative number moves it toward zero.
        return Some(i64::try_from(value).map_or(i64::MIN, |v| -v));
    }
    if fractional {
        value += 1;
    }
    Some(i64::try_from(value).unwrap_or(i64::MAX))
}

/// The quantity in whole units (bytes, pods, …), rounded up; `None` if it does not parse.
pub fn value(text: &str) -> Option<i64> {
    scaled(text, 0)
}

/// The quantity in thousandths (CPU millicores), rounded up; `None` if it does not parse.
pub fn milli_value(text: &str) -> Option<i64> {
    scaled(text, 3)
}

/// `amount` written as a quantity: millicores as `"250m"` (or whole cores, `"2"`) when
/// `milli`, otherwise whole units, with the largest binary suffix that divides them
/// (`"128Mi"`), or plain digits.
pub fn format(amount: i64, milli: bool) -> String {
    if milli {
        return if amount % 1000 == 0 {
            (amount / 1000).to_string()
        } else {
            format!("{amount}m")
        };
    }
    if amount != 0 {
        for (shift, suffix) in [
            (60, "Ei"),
            (50, "Pi"),
            (40, "Ti"),
            (30, "Gi"),
            (20, "Mi"),
            (10, "Ki"),
        ] {
            let unit = 1i64 << shift;
            if amount % unit == 0 {
                return format!("{}{suffix}", amount / unit);
            }
        }
    }
    amount.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_in_millicores() {
        assert_eq!(milli_value("1"), Some(1000));
        assert_eq!(milli_value("100m"), Some(100));
        assert_eq!(milli_value("0.5"), Some(500));
        assert_eq!(milli_value(".25"), Some(250));
        assert_eq!(milli_value("2.5k"), Some(2_500_000));
        assert_eq!(milli_value("1e-3"), Some(1));
        assert_eq!(milli_value("1E2"), Some(100_000));
        assert_eq!(milli_value("+3"), Some(3000));
        // Finer than a millicore rounds up, as Quantity.MilliValue does.
        assert_eq!(milli_value("0.0001"), Some(1));
        assert_eq!(milli_value("1500u"), Some(2));
        assert_eq!(milli_value("10n"), Some(1));
        assert_eq!(milli_value("0"), Some(0));
        assert_eq!(milli_value("0m"), Some(0));
    }

    #[test]
    fn memory_in_bytes() {
        assert_eq!(value("128Mi"), Some(128 * 1024 * 1024));
        assert_eq!(value("1Gi"), Some(1 << 30));
        assert_eq!(value("1.5Gi"), Some(3 << 29));
        assert_eq!(value("1G"), Some(1_000_000_000));
        assert_eq!(value("2Ki"), Some(2048));
        assert_eq!(value("1.5"), Some(2));
        assert_eq!(value("100m"), Some(1));
        assert_eq!(value("110"), Some(110));
        assert_eq!(value("3e2"), Some(300));
    }

    #[test]
    fn saturation_and_signs() {
        assert_eq!(value("16Ei"), Some(i64::MAX));
        assert_eq!(value("1e100"), Some(i64::MAX));
        assert_eq!(value("1e-100"), Some(1));
        assert_eq!(
            value("99999999999999999999999999999999999999999"),
            Some(i64::MAX)
        );
        assert_eq!(value("-1"), Some(-1));
        assert_eq!(value("-1.5"), Some(-1));
        assert_eq!(milli_value("-100m"), Some(-100));
    }

    #[test]
    fn formatted_amounts_read_back_as_themselves() {
        assert_eq!(format(250, true), "250m");
        assert_eq!(format(2000, true), "2");
        assert_eq!(format(128 << 20, false), "128Mi");
        assert_eq!(format(1000, false), "1000");
        assert_eq!(format(0, false), "0");
        for (amount, milli) in [(1, true), (1536, false), (7 << 30, false), (-5, false)] {
            let text = format(amount, milli);
            let back = if milli {
                milli_value(&text)
            } else {
                value(&text)
            };
            assert_eq!(back, Some(amount), "{text}");
        }
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            "", " ", "m", "Mi", "1.2.3", "1x", "1 Mi", "e3", "1e", "1e+", "--1", "1mi", "1KiB", ".",
        ] {
            assert_eq!(value(bad), None, "{bad:?}");
        }
    }
}
