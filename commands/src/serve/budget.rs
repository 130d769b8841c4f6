//! Sizing the server from its settings and the model: token limits per request (defaults from the
//! context length) and the KV cache budget (default from available memory), checked against each other.

use super::limits::RequestLimits;
use super::settings::ServeSettings;
use crate::error::InputError;

/// Tokens per KV cache block (the scheduler allocates whole blocks).
pub const BLOCK_SIZE: usize = tgi_engines::kv::BLOCK_SIZE;

/// The share of available memory the KV cache takes by default.
const MEMORY_FRACTION: f64 = 0.5;

/// What sizing needs to know about the model and the machine.
#[derive(Clone, Copy, Debug)]
pub struct SizingInputs {
    /// The model's context length.
    pub context: usize,
    /// KV cache bytes per token (keys and values of every layer).
    pub kv_bytes_per_token: usize,
    /// Available memory in bytes, when known.
    pub mem_available: Option<u64>,
    /// The scheduler's default batch size.
    pub default_max_batch_size: usize,
}

/// The server's sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizes {
    /// Per-request limits.
    pub limits: RequestLimits,
    /// Most sequences per batch.
    pub max_batch_size: usize,
}

/// Derives the sizes from the settings and checks them against the model and the memory; errors name
/// the flag at fault.
pub fn size(settings: &ServeSettings, m: &SizingInputs) -> Result<Sizes, InputError> {
    let bad = |msg: String| Err(InputError(msg));
    let max_total = settings.max_total_tokens.unwrap_or(m.context);
    if max_total > m.context {
        return bad(format!(
            "--max-total-tokens ({max_total}) is larger than the model's context length ({})",
            m.context
        ));
    }
    if max_total < 2 {
        return bad(format!("the model's context length ({max_total}) is below 2 tokens"));
    }
    let max_input = settings.max_input_tokens.unwrap_or(max_total - 1);
    if max_input >= max_total {
        return bad(format!("--max-input-tokens ({max_input}) must be less than --max-total-tokens ({max_total})"));
    }
    let max_batch_size = settings.max_batch_size.unwrap_or(m.default_max_batch_size);
    let kv_tokens = match settings.max_batch_total_tokens {
        Some(t) => t,
        None => {
            let cap = max_batch_size.saturating_mul(m.context);
            let fit = m
                .mem_available
                .map_or(cap, |bytes| (bytes as f64 * MEMORY_FRACTION / m.kv_bytes_per_token.max(1) as f64) as usize);
            fit.min(cap)
        }
    };
    let kv_tokens = kv_tokens / BLOCK_SIZE * BLOCK_SIZE;
    if kv_tokens < max_total {
        let (from, fix) = match settings.max_batch_total_tokens {
            Some(_) => ("", "raise it or lower --max-total-tokens"),
            None => (" from the available memory", "lower --max-total-tokens or free memory"),
        };
        return bad(format!(
            "--max-batch-total-tokens ({kv_tokens}{from}) is smaller than --max-total-tokens ({max_total}): one \
             request could never fit; {fix}"
        ));
    }
    Ok(Sizes {
        limits: RequestLimits {
            max_concurrent_requests: settings.max_concurrent_requests,
            max_best_of: settings.max_best_of,
            max_stop_sequences: settings.max_stop_sequences,
            max_top_n_tokens: settings.max_top_n_tokens,
            max_input_tokens: max_input,
            max_total_tokens: max_total,
            max_n: settings.max_n,
            payload_limit: settings.payload_limit,
            request_timeout: settings.request_timeout,
            body_timeout: settings.body_timeout,
            max_batch_total_tokens: kv_tokens,
        },
        max_batch_size,
    })
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text)
}

fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::settings::tests::settings;

    fn size_of(flags: &[&str], m: &SizingInputs) -> Result<Sizes, InputError> {
        size(&settings(flags)?, m)
    }

    const M: SizingInputs = SizingInputs {
        context: 512,
        kv_bytes_per_token: 1024,
        mem_available: Some(1 << 30),
        default_max_batch_size: 128,
    };

    #[test]
    fn defaults_follow_the_model_and_memory() {
        let s = size_of(&[], &M).unwrap();
        assert_eq!((s.limits.max_total_tokens, s.limits.max_input_tokens), (512, 511));
        // Half of 1 GiB at 1 KiB per token, under the 128 x 512 cap.
        assert_eq!(s.limits.max_batch_total_tokens, 65536);
        let s = size_of(&[], &SizingInputs { mem_available: Some(64 << 20), ..M }).unwrap();
        assert_eq!(s.limits.max_batch_total_tokens, 32768);
        assert_eq!(s.max_batch_size, 128);
        assert_eq!(size_of(&["--max-batch-total-tokens", "1000"], &M).unwrap().limits.max_batch_total_tokens, 992);
    }

    #[test]
    fn refuses_inconsistent_sizes() {
        let err = |flags: &[&str], m: &SizingInputs| size_of(flags, m).unwrap_err().0;
        assert!(err(&["--max-total-tokens", "600"], &M).contains("context length (512)"));
        assert!(err(&["--max-input-tokens", "512"], &M).contains("less than --max-total-tokens (512)"));
        assert!(err(&["--max-batch-total-tokens", "256"], &M).contains("smaller than --max-total-tokens (512)"));
        assert!(err(&[], &SizingInputs { mem_available: Some(100_000), ..M }).contains("available memory"));
        assert!(err(&["--max-concurrent-requests", "0"], &M).contains("--max-concurrent-requests"));
        assert!(err(&[], &SizingInputs { context: 1, ..M }).contains("context length (1)"));
    }

    #[test]
    fn meminfo() {
        assert_eq!(parse_meminfo("MemTotal: 10 kB\nMemAvailable:    2048 kB\n"), Some(2048 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 10 kB\n"), None);
    }
}
