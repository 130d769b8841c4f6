//! Latency objectives: per request (`tgi bench --slo`, goodput) and as P99 limits of a hardware
//! profile (`tgi tune`).

use serde::{Deserialize, Serialize};

use crate::duration::parse_duration;

/// Service-level objectives: a request meets them when each one given holds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slo {
    /// Most time to first token, ms.
    pub ttft_ms: Option<f64>,
    /// Most time per output token, ms.
    pub tpot_ms: Option<f64>,
    /// Most end-to-end latency, ms.
    pub e2e_ms: Option<f64>,
}

impl std::str::FromStr for Slo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut slo = Slo::default();
        for part in s.split(',') {
            let (k, v) =
                part.split_once('=').ok_or_else(|| format!("'{part}': expected NAME=TIME, e.g. ttft=200ms"))?;
            let ms = parse_duration(v)?.as_secs_f64() * 1000.0;
            match k.trim() {
                "ttft" => slo.ttft_ms = Some(ms),
                "tpot" => slo.tpot_ms = Some(ms),
                "e2e" => slo.e2e_ms = Some(ms),
                other => return Err(format!("unknown SLO '{other}' (ttft, tpot, e2e)")),
            }
        }
        Ok(slo)
    }
}

/// Latency objectives: a configuration meets them when each P99 is within its limit and no request failed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSlo {
    /// Most P99 time to first token, ms.
    pub ttft_p99_ms: f64,
    /// Most P99 time per output token, ms.
    pub tpot_p99_ms: f64,
    /// Most P99 end-to-end latency, ms.
    pub e2e_p99_ms: f64,
}

impl ProfileSlo {
    /// The same limits as per-request objectives (for goodput).
    pub fn per_request(&self) -> Slo {
        Slo { ttft_ms: Some(self.ttft_p99_ms), tpot_ms: Some(self.tpot_p99_ms), e2e_ms: Some(self.e2e_p99_ms) }
    }

    /// From `--slo ttft=..,tpot=..,e2e=..`: the limits given replace these.
    pub fn with(self, s: &Slo) -> ProfileSlo {
        ProfileSlo {
            ttft_p99_ms: s.ttft_ms.unwrap_or(self.ttft_p99_ms),
            tpot_p99_ms: s.tpot_ms.unwrap_or(self.tpot_p99_ms),
            e2e_p99_ms: s.e2e_ms.unwrap_or(self.e2e_p99_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_overrides() {
        let slo: Slo = "ttft=200ms,tpot=50ms,e2e=2s".parse().unwrap();
        assert_eq!(slo, Slo { ttft_ms: Some(200.0), tpot_ms: Some(50.0), e2e_ms: Some(2000.0) });
        assert!("itl=3ms".parse::<Slo>().is_err());
        let p = ProfileSlo { ttft_p99_ms: 1.0, tpot_p99_ms: 2.0, e2e_p99_ms: 3.0 };
        let q = p.with(&"tpot=5ms".parse().unwrap());
        assert_eq!(q, ProfileSlo { ttft_p99_ms: 1.0, tpot_p99_ms: 5.0, e2e_p99_ms: 3.0 });
        assert_eq!(q.per_request().e2e_ms, Some(3.0));
    }
}
