//! Sizes in bytes as flags take them: a number of bytes, or a number with a unit (`512KiB`, `64MB`, `1GiB`).

use std::fmt;
use std::str::FromStr;

/// Byte units, longest first so that `MiB` is not read as `B`.
const UNITS: &[(&str, usize)] = &[
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("K", 1 << 10),
    ("M", 1 << 20),
    ("G", 1 << 30),
    ("B", 1),
];

/// A positive number and the scale of its unit (`None` without a unit); `None` for anything else.
pub fn number_and_unit(raw: &str) -> Option<(usize, Option<usize>)> {
    let s = raw.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: usize = digits.parse().ok().filter(|&n| n > 0)?;
    let unit = unit.trim();
    if unit.is_empty() {
        return Some((n, None));
    }
    let (_, scale) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit))?;
    Some((n, Some(*scale)))
}

/// A positive number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub usize);

/// Why a size was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a positive size in bytes such as 65536, 512KiB, 64MB or 1GiB")]
pub struct BadByteSize(String);

impl FromStr for ByteSize {
    type Err = BadByteSize;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let (n, scale) = number_and_unit(raw).ok_or_else(|| BadByteSize(raw.to_string()))?;
        n.checked_mul(scale.unwrap_or(1)).map(ByteSize).ok_or_else(|| BadByteSize(raw.to_string()))
    }
}

impl fmt::Display for ByteSize {
    /// In the largest binary unit that divides it (`1MiB`, `1536KiB`), else in bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit =
            [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)].into_iter().find(|(_, s)| self.0.is_multiple_of(*s));
        match unit {
            Some((name, scale)) => write!(f, "{}{name}", self.0 / scale),
            None => write!(f, "{}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_with_or_without_a_unit() {
        assert_eq!("65536".parse(), Ok(ByteSize(65536)));
        assert_eq!("64MB".parse(), Ok(ByteSize(64_000_000)));
        assert_eq!("1 mib".parse(), Ok(ByteSize(1 << 20)));
        for bad in ["", "0", "0KiB", "-1", "1.5MB", "12 parsecs", "MB", "99999999999999999999GB"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad}");
        }
        for size in ["1MiB", "1536KiB", "100", "2GiB"] {
            assert_eq!(size.parse::<ByteSize>().unwrap().to_string(), size);
        }
    }
}
