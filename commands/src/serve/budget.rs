//! Sizing the server from its settings and the model: token limits per request (defaults from the
//! context length) and the KV cache budget, checked against each other. On the CPU the cache holds what the
//! server will use, as llama-server sizes `-c` times `--parallel`: --max-batch-size sequences of
//! --max-total-tokens each (by default 16 of at most 4096), bounded by half the host's available memory. On a
//! GPU it takes most of the device's free memory after the weights are loaded, as TGI does.

use std::fmt;

use tgi_engines::device::DeviceSpec;
use tgi_engines::lora::full_adapter_bytes;
use tgi_engines::model::DecoderConfig;

use super::limits::RequestLimits;
use super::settings::ServeSettings;
use crate::error::InputError;

/// Tokens per KV cache block (the scheduler allocates whole blocks).
pub const BLOCK_SIZE: usize = tgi_engines::kv::BLOCK_SIZE;

/// The share of the host's available memory the KV cache takes at most by default.
const HOST_FRACTION: f64 = 0.5;

/// Most sequences per batch on the CPU by default: a CPU step's cost grows with the batch well before a GPU's
/// does, and the cache is sized for them all.
pub const CPU_MAX_BATCH_SIZE: usize = 16;

/// Most tokens per request on the CPU by default when the model's context is longer: llama.cpp's `-c` default
/// of many releases, and the cap TGI's launcher applies to long-context models.
pub const CPU_MAX_TOTAL_TOKENS: usize = 4096;

/// The share of a GPU's free memory (after the weights are loaded) the KV cache takes by default; the rest is
/// left for activations, cuBLAS workspaces and the allocator.
const DEVICE_FRACTION: f64 = 0.9;

/// Memory the KV cache may take a share of.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Memory {
    /// Bytes available.
    pub bytes: u64,
    /// Which memory: the host's, or a GPU's.
    pub device: DeviceSpec,
}

impl Memory {
    /// The memory a model on `device` keeps its KV cache in: the GPU's free memory (`gpu_free`, from the driver)
    /// when it has one, else the host's `MemAvailable`.
    pub fn of(device: DeviceSpec, gpu_free: Option<u64>) -> Option<Memory> {
        match gpu_free {
            Some(bytes) => Some(Memory { bytes, device }),
            None => mem_available().map(|bytes| Memory { bytes, device: DeviceSpec::Cpu }),
        }
    }

    /// The share of it the KV cache takes by default.
    fn fraction(&self) -> f64 {
        match self.device {
            DeviceSpec::Cpu => HOST_FRACTION,
            _ => DEVICE_FRACTION,
        }
    }

    /// KV tokens that fit in the default share at `bytes_per_token`, once `reserved` bytes (LoRA adapters) are
    /// taken from it.
    fn tokens(&self, bytes_per_token: usize, reserved: u64) -> usize {
        let share = (self.bytes as f64 * self.fraction() - reserved as f64).max(0.0);
        (share / bytes_per_token.max(1) as f64) as usize
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gib = self.bytes as f64 / (1u64 << 30) as f64;
        match self.device {
            DeviceSpec::Cpu => write!(f, "half of the host's {gib:.1} GiB available memory"),
            d => write!(f, "{:.0}% of {d}'s {gib:.1} GiB free memory", self.fraction() * 100.0),
        }
    }
}

/// What sizing needs to know about the model and the machine.
#[derive(Clone, Copy, Debug)]
pub struct SizingInputs {
    /// The model's context length.
    pub context: usize,
    /// KV cache bytes per token (keys and values of every layer).
    pub kv_bytes_per_token: usize,
    /// The memory the KV cache lives in, when known.
    pub memory: Option<Memory>,
    /// Where the model runs: the CPU's defaults differ from a GPU's.
    pub device: DeviceSpec,
    /// Bytes held back from the KV cache's share of memory for LoRA adapters ([`lora_reserve`]).
    pub lora_reserved: u64,
}

/// The memory LoRA adapters may take, as vLLM reserves it: `max_loras` adapters of rank `max_rank` on every
/// projection of every layer of `cfg`.
pub fn lora_reserve(cfg: &DecoderConfig, max_loras: usize, max_rank: usize) -> u64 {
    max_loras as u64 * full_adapter_bytes(cfg, max_rank)
}

impl SizingInputs {
    /// Whether the CPU's defaults apply.
    fn on_cpu(&self) -> bool {
        self.device == DeviceSpec::Cpu
    }

    /// Most sequences per batch when --max-batch-size is not given.
    fn default_max_batch_size(&self) -> usize {
        if self.on_cpu() {
            CPU_MAX_BATCH_SIZE
        } else {
            tgi_engines::scheduler::SchedulerConfig::default().max_batch_size
        }
    }

    /// Most tokens per request when --max-total-tokens is not given: the context length (on the CPU at most
    /// [`CPU_MAX_TOTAL_TOKENS`], unless --max-input-tokens asks for more).
    fn default_max_total_tokens(&self, max_input: Option<usize>) -> usize {
        if self.on_cpu() {
            let wanted = max_input.map_or(CPU_MAX_TOTAL_TOKENS, |i| CPU_MAX_TOTAL_TOKENS.max(i.saturating_add(1)));
            self.context.min(wanted)
        } else {
            self.context
        }
    }
}

/// What decided the KV cache's size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KvBudget {
    /// `--max-batch-total-tokens`.
    Flag,
    /// A share of this memory.
    Memory(Memory),
    /// The batch size times the tokens per request (on the CPU, within its share of memory).
    BatchTimesTotal,
    /// The batch size times the context length (on a GPU, less than its memory holds, or the memory is unknown).
    BatchTimesContext,
}

impl fmt::Display for KvBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvBudget::Flag => f.write_str("--max-batch-total-tokens"),
            KvBudget::Memory(m) => write!(f, "{m}"),
            KvBudget::BatchTimesTotal => f.write_str("--max-batch-size times --max-total-tokens"),
            KvBudget::BatchTimesContext => f.write_str("--max-batch-size times the context length"),
        }
    }
}

/// The server's sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizes {
    /// Per-request limits.
    pub limits: RequestLimits,
    /// Most sequences per batch.
    pub max_batch_size: usize,
    /// What decided `limits.max_batch_total_tokens`.
    pub kv_budget: KvBudget,
}

/// Derives the sizes from the settings and checks them against the model and the memory; errors name
/// the flag at fault.
pub fn size(settings: &ServeSettings, m: &SizingInputs) -> Result<Sizes, InputError> {
    let bad = |msg: String| Err(InputError(msg));
    let max_total = settings.max_total_tokens.unwrap_or_else(|| m.default_max_total_tokens(settings.max_input_tokens));
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
    let max_batch_size = settings.max_batch_size.unwrap_or_else(|| m.default_max_batch_size());
    let (cap, whole) = if m.on_cpu() {
        (max_batch_size.saturating_mul(max_total), KvBudget::BatchTimesTotal)
    } else {
        (max_batch_size.saturating_mul(m.context), KvBudget::BatchTimesContext)
    };
    let (kv_tokens, kv_budget) = match (settings.max_batch_total_tokens, m.memory) {
        (Some(t), _) => (t, KvBudget::Flag),
        (None, Some(memory)) if memory.tokens(m.kv_bytes_per_token, m.lora_reserved) < cap => {
            (memory.tokens(m.kv_bytes_per_token, m.lora_reserved), KvBudget::Memory(memory))
        }
        (None, _) => (cap, whole),
    };
    // Whole blocks: a share of memory or a flag rounds down, a product of batch and request sizes up.
    let kv_tokens = match kv_budget {
        KvBudget::Flag | KvBudget::Memory(_) => kv_tokens / BLOCK_SIZE * BLOCK_SIZE,
        KvBudget::BatchTimesTotal | KvBudget::BatchTimesContext => kv_tokens.div_ceil(BLOCK_SIZE) * BLOCK_SIZE,
    };
    if kv_tokens < max_total {
        let lora = if m.lora_reserved > 0 && matches!(kv_budget, KvBudget::Memory(_)) {
            format!(" after {:.1} MiB reserved for LoRA adapters", m.lora_reserved as f64 / (1u64 << 20) as f64)
        } else {
            String::new()
        };
        let (from, fix) = match kv_budget {
            KvBudget::Memory(Memory { device: DeviceSpec::Cpu, .. }) => {
                (" from the available memory".to_string(), "lower --max-total-tokens or free memory")
            }
            KvBudget::Memory(Memory { device, .. }) => {
                (format!(" from {device}'s free memory"), "lower --max-total-tokens or free memory")
            }
            _ => (String::new(), "raise it or lower --max-total-tokens"),
        };
        return bad(format!(
            "--max-batch-total-tokens ({kv_tokens}{from}{lora}) is smaller than --max-total-tokens ({max_total}): \
             one request could never fit; {fix}"
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
        kv_budget,
    })
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
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

    /// A model of 512 tokens' context at 1 KiB per token, on a GPU with 1 GiB free.
    const M: SizingInputs = SizingInputs {
        context: 512,
        kv_bytes_per_token: 1024,
        memory: Some(Memory { bytes: 1 << 30, device: DeviceSpec::Cuda(0) }),
        device: DeviceSpec::Cuda(0),
        lora_reserved: 0,
    };

    /// The same model on the CPU of a host with `bytes` available, and a context of `context` tokens.
    fn cpu(bytes: u64, context: usize) -> SizingInputs {
        SizingInputs { context, memory: Some(Memory { bytes, device: DeviceSpec::Cpu }), device: DeviceSpec::Cpu, ..M }
    }

    fn with_memory(bytes: u64, device: DeviceSpec) -> SizingInputs {
        SizingInputs { memory: Some(Memory { bytes, device }), device, ..M }
    }

    #[test]
    fn on_the_cpu_the_cache_holds_the_batch_times_the_tokens_per_request() {
        // A 32k-context model on a host with 20 GiB available: 16 sequences of 4096 tokens, as llama-server's
        // `-c 4096 --parallel 16`, not half the memory.
        let s = size_of(&[], &cpu(20 << 30, 32768)).unwrap();
        assert_eq!((s.limits.max_total_tokens, s.limits.max_input_tokens), (4096, 4095));
        assert_eq!((s.max_batch_size, s.limits.max_batch_total_tokens), (16, 65536));
        assert_eq!(s.kv_budget, KvBudget::BatchTimesTotal);
        assert_eq!(s.kv_budget.to_string(), "--max-batch-size times --max-total-tokens");
        // The batch and the request size follow their flags (-c and --parallel name the same settings).
        let s = size_of(&["--max-batch-size", "4", "--max-total-tokens", "8192"], &cpu(20 << 30, 32768)).unwrap();
        assert_eq!(s.limits.max_batch_total_tokens, 32768);
        // A longer --max-input-tokens raises the default request size, within the context.
        let s = size_of(&["--max-input-tokens", "10000"], &cpu(20 << 30, 32768)).unwrap();
        assert_eq!((s.limits.max_total_tokens, s.limits.max_batch_total_tokens), (10001, 160016));
        // A short context is used whole; sizes round up to whole blocks.
        let s = size_of(&[], &cpu(20 << 30, 512)).unwrap();
        assert_eq!((s.limits.max_total_tokens, s.limits.max_batch_total_tokens), (512, 8192));
        let s = size_of(&["--max-batch-size", "1", "--max-total-tokens", "100"], &cpu(20 << 30, 512)).unwrap();
        assert_eq!(s.limits.max_batch_total_tokens, 112);
        // Half the available memory bounds it: 64 MiB at 1 KiB per token.
        let s = size_of(&[], &cpu(64 << 20, 32768)).unwrap();
        assert_eq!(s.limits.max_batch_total_tokens, 32768);
        assert_eq!(s.kv_budget.to_string(), "half of the host's 0.1 GiB available memory");
        // The flag beats both.
        let s = size_of(&["--max-batch-total-tokens", "1000"], &cpu(20 << 30, 512)).unwrap();
        assert_eq!((s.limits.max_batch_total_tokens, s.kv_budget), (992, KvBudget::Flag));
        // Unknown memory: the product.
        let s = size_of(&[], &SizingInputs { memory: None, ..cpu(0, 32768) }).unwrap();
        assert_eq!((s.limits.max_batch_total_tokens, s.kv_budget), (65536, KvBudget::BatchTimesTotal));
    }

    #[test]
    fn a_gpu_budget_is_most_of_its_free_memory() {
        // The GPU defaults: the whole context per request, 128 sequences, 90% of the free memory at most.
        let s = size_of(&[], &M).unwrap();
        assert_eq!((s.limits.max_total_tokens, s.limits.max_input_tokens, s.max_batch_size), (512, 511, 128));
        assert_eq!((s.limits.max_batch_total_tokens, s.kv_budget), (65536, KvBudget::BatchTimesContext));
        // 90% of 64 MiB of free device memory at 1 KiB per token: 58982.4 tokens, down to whole blocks.
        let s = size_of(&[], &with_memory(64 << 20, DeviceSpec::Cuda(0))).unwrap();
        assert_eq!(s.limits.max_batch_total_tokens, 58976);
        assert_eq!(s.kv_budget.to_string(), "90% of cuda:0's 0.1 GiB free memory");
        let err = size_of(&[], &with_memory(100_000, DeviceSpec::Cuda(1))).unwrap_err().0;
        assert!(err.contains("(80 from cuda:1's free memory)"), "{err}");
        let s = size_of(&[], &SizingInputs { memory: None, ..M }).unwrap();
        assert_eq!((s.limits.max_batch_total_tokens, s.kv_budget), (65536, KvBudget::BatchTimesContext));
    }

    #[test]
    fn lora_adapters_are_reserved_from_the_memory_share() {
        // 90% of 64 MiB less 8 MiB for adapters, at 1 KiB per token: 50790.4 tokens, down to whole blocks.
        let m = SizingInputs { lora_reserved: 8 << 20, ..with_memory(64 << 20, DeviceSpec::Cuda(0)) };
        assert_eq!(size_of(&[], &m).unwrap().limits.max_batch_total_tokens, 50784);
        let m = SizingInputs { lora_reserved: 60 << 20, ..m };
        let err = size_of(&[], &m).unwrap_err().0;
        assert!(err.contains("(0 from cuda:0's free memory after 60.0 MiB reserved for LoRA adapters)"), "{err}");
        // 16 adapters of rank 16 on the bundled model: 16 times one adapter's bytes.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/hf/config.json");
        let hf = tgi_formats::hf::ModelConfig::from_file(std::path::Path::new(path)).unwrap();
        let cfg = DecoderConfig::from_hf(&hf).unwrap();
        // 5 layers; per layer and rank: q 64+64, k and v 64+32, o 64+64, gate, up and down 64+172.
        let per_rank = 5 * (128 + 96 + 96 + 128 + 3 * 236);
        assert_eq!(lora_reserve(&cfg, 16, 16), 16 * per_rank * 16 * 4);
        assert_eq!(lora_reserve(&cfg, 0, 16), 0);
    }

    #[test]
    fn the_memory_is_the_gpus_when_it_has_one() {
        let gpu = Memory::of(DeviceSpec::Cuda(0), Some(5 << 30)).unwrap();
        assert_eq!(gpu, Memory { bytes: 5 << 30, device: DeviceSpec::Cuda(0) });
        if let Some(host) = Memory::of(DeviceSpec::Cpu, None) {
            assert_eq!(host.device, DeviceSpec::Cpu);
        }
    }

    #[test]
    fn refuses_inconsistent_sizes() {
        let err = |flags: &[&str], m: &SizingInputs| size_of(flags, m).unwrap_err().0;
        assert!(err(&["--max-total-tokens", "600"], &M).contains("context length (512)"));
        assert!(err(&["--max-input-tokens", "512"], &M).contains("less than --max-total-tokens (512)"));
        assert!(err(&["--max-batch-total-tokens", "256"], &M).contains("smaller than --max-total-tokens (512)"));
        assert!(err(&[], &cpu(100_000, 512)).contains("(48 from the available memory)"));
        assert!(err(&["--max-concurrent-requests", "0"], &M).contains("--max-concurrent-requests"));
        assert!(err(&[], &SizingInputs { context: 1, ..M }).contains("context length (1)"));
    }

    #[test]
    fn meminfo() {
        assert_eq!(parse_meminfo("MemTotal: 10 kB\nMemAvailable:    2048 kB\n"), Some(2048 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 10 kB\n"), None);
    }
}
