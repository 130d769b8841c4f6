//! `--response-cache-size` and `--responses-store-size`: a number of entries, or a size in bytes with a unit.

use std::fmt;
use std::str::FromStr;

use crate::serve::byte_size::number_and_unit;

/// How much a store holds: entries (`1000`) or bytes (`64MB`, `1GiB`, `512KiB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheSize {
    /// At most this many entries.
    Entries(usize),
    /// At most this many bytes of entries (their approximate size in memory, keys included).
    Bytes(usize),
}

/// Why a size value was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a positive number of entries or a size such as 64MB, 512KiB or 1GiB")]
pub struct BadCacheSize(String);

impl FromStr for CacheSize {
    type Err = BadCacheSize;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let bad = || BadCacheSize(raw.to_string());
        match number_and_unit(raw).ok_or_else(bad)? {
            (n, None) => Ok(CacheSize::Entries(n)),
            (n, Some(scale)) => n.checked_mul(scale).map(CacheSize::Bytes).ok_or_else(bad),
        }
    }
}

impl fmt::Display for CacheSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheSize::Entries(n) => write!(f, "{n} entries"),
            CacheSize::Bytes(n) => write!(f, "{:.1} MiB", *n as f64 / (1 << 20) as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_or_bytes() {
        assert_eq!("1000".parse(), Ok(CacheSize::Entries(1000)));
        assert_eq!("64MB".parse(), Ok(CacheSize::Bytes(64_000_000)));
        assert_eq!("64 mib".parse(), Ok(CacheSize::Bytes(64 << 20)));
        assert_eq!("2G".parse(), Ok(CacheSize::Bytes(2 << 30)));
        assert_eq!("512KiB".parse(), Ok(CacheSize::Bytes(512 << 10)));
        for bad in ["", "0", "0MB", "-1", "1.5MB", "12 parsecs", "MB", "99999999999999999999GB"] {
            assert!(bad.parse::<CacheSize>().is_err(), "{bad}");
        }
        assert_eq!(CacheSize::Bytes(3 << 20).to_string(), "3.0 MiB");
    }
}
