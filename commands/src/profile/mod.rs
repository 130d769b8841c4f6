//! Hardware profiles (`profiles/*.toml`, embedded in the binary): a target machine, the latency
//! objectives that matter there and the workload to measure, plus `auto` (this machine). Shared by
//! `tgi tune` (which sweeps for a profile), `tgi serve --profile` (which applies the result) and
//! `tgi bench` (whose `--slo` is the per-request form of a profile's objectives).

mod machine;
mod slo;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use self::machine::LocalMachine;
pub use self::slo::{ProfileSlo, Slo};
use crate::error::InputError;

/// The profile of this machine (`--profile auto`).
pub const AUTO: &str = "auto";

/// The profiles shipped in `profiles/`, as (file name, text).
const BUILTIN: [(&str, &str); 8] = [
    ("rpi5.toml", include_str!("../../../profiles/rpi5.toml")),
    ("n5105.toml", include_str!("../../../profiles/n5105.toml")),
    ("x86-4c8g.toml", include_str!("../../../profiles/x86-4c8g.toml")),
    ("jetson-orin-nano.toml", include_str!("../../../profiles/jetson-orin-nano.toml")),
    ("apple-m2.toml", include_str!("../../../profiles/apple-m2.toml")),
    ("l4.toml", include_str!("../../../profiles/l4.toml")),
    ("a10g.toml", include_str!("../../../profiles/a10g.toml")),
    ("h100.toml", include_str!("../../../profiles/h100.toml")),
];

/// A target machine with its objectives and workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name (`tgi tune --profile NAME`, `tgi serve --profile NAME`).
    pub name: String,
    /// One line on the hardware.
    pub description: String,
    /// Where the model runs.
    pub device: DeviceKind,
    /// CPU cores.
    pub cores: usize,
    /// CPU threads the engine should use.
    pub threads: usize,
    /// Host memory, GiB.
    pub memory_gib: f64,
    /// GPU memory, GiB (GPU targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_gib: Option<f64>,
    /// Peak bandwidth of the memory holding the weights, GB/s, where published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bandwidth_gbs: Option<f64>,
    /// Latency objectives (P99s).
    pub slo: ProfileSlo,
    /// The load measured for every configuration.
    pub workload: Workload,
}

/// The kind of device a profile targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// CPU only.
    Cpu,
    /// An NVIDIA GPU.
    Cuda,
    /// An Apple GPU.
    Metal,
}

impl DeviceKind {
    /// The name used in profiles.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Metal => "metal",
        }
    }
}

/// The load: synthetic prompts of a fixed length, answers of a fixed length (end-of-sequence ignored).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Prompt tokens per request.
    pub input_tokens: u64,
    /// Generated tokens per request.
    pub output_tokens: u64,
    /// Clients in a closed loop (with `rate`, the cap on requests in flight).
    pub concurrency: usize,
    /// Open loop: mean requests per second (Poisson arrivals) instead of a closed loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Requests measured per repeat.
    pub requests: usize,
}

impl Profile {
    /// Parses and checks a profile; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Profile, InputError> {
        let p: Profile = toml::from_str(text).map_err(|e| InputError(format!("profile {origin}: {e}")))?;
        p.check().map_err(|e| InputError(format!("profile {origin}: {e}")))?;
        Ok(p)
    }

    fn check(&self) -> Result<(), String> {
        let w = &self.workload;
        let positive = [self.memory_gib, self.slo.ttft_p99_ms, self.slo.tpot_p99_ms, self.slo.e2e_p99_ms];
        if self.cores == 0 || self.threads == 0 || positive.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return Err("cores, threads, memory_gib and the SLOs must be positive".into());
        }
        if w.input_tokens == 0 || w.output_tokens == 0 || w.concurrency == 0 || w.requests == 0 {
            return Err("the workload's tokens, concurrency and requests must be at least 1".into());
        }
        if w.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return Err("workload.rate must be a positive number of requests per second".into());
        }
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(format!("name '{}' must be letters, digits, '-', '_' or '.'", self.name));
        }
        Ok(())
    }

    /// The shipped profiles, in `profiles/` order.
    pub fn builtin() -> Vec<Profile> {
        BUILTIN.iter().map(|(file, text)| Profile::parse(text, file).expect("shipped profiles are valid")).collect()
    }

    /// A shipped profile by name.
    pub fn named(name: &str) -> Option<Profile> {
        Profile::builtin().into_iter().find(|p| p.name == name)
    }

    /// `NAME` (shipped), `FILE.toml` or `auto`.
    pub fn resolve(spec: &str) -> Result<Profile, InputError> {
        if spec == AUTO {
            return Ok(Profile::auto(&LocalMachine::this()));
        }
        if spec.ends_with(".toml") || Path::new(spec).is_file() {
            let text = std::fs::read_to_string(spec).map_err(|e| InputError(format!("cannot read {spec}: {e}")))?;
            return Profile::parse(&text, spec);
        }
        Profile::named(spec).ok_or_else(|| {
            let names: Vec<String> = Profile::builtin().into_iter().map(|p| p.name).collect();
            InputError(format!("no profile '{spec}' (shipped: {}; or a FILE.toml, or auto)", names.join(", ")))
        })
    }

    /// A profile of `m` itself: its cores and memory, the CPU, and default objectives.
    pub fn auto(m: &LocalMachine) -> Profile {
        Profile {
            name: AUTO.into(),
            description: format!("this machine: {} cores, {:.1} GiB", m.cores, m.memory_gib),
            device: DeviceKind::Cpu,
            cores: m.cores,
            threads: m.cores,
            memory_gib: m.memory_gib,
            gpu_memory_gib: None,
            memory_bandwidth_gbs: None,
            slo: ProfileSlo { ttft_p99_ms: 2000.0, tpot_p99_ms: 200.0, e2e_p99_ms: 30000.0 },
            workload: Workload {
                input_tokens: 128,
                output_tokens: 64,
                concurrency: m.cores.clamp(1, 4),
                rate: None,
                requests: 16,
            },
        }
    }

    /// The serve settings the profile itself implies (before any tuning): its thread count, within this machine.
    pub fn baseline(&self, m: &LocalMachine) -> toml::Table {
        let mut t = toml::Table::new();
        t.insert("threads".into(), toml::Value::Integer(self.threads.min(m.cores) as i64));
        t
    }
}

/// Where tuned configurations are kept: `$XDG_CONFIG_HOME/tgi/tuned`, else `~/.config/tgi/tuned`.
pub fn tuned_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("tgi").join("tuned"))
}

/// The tuned configuration of the profile `name`.
pub fn tuned_path(name: &str) -> Option<PathBuf> {
    tuned_dir().map(|d| d.join(format!("{name}.toml")))
}

/// `tgi tune --list-profiles`: the shipped profiles as a table.
pub fn list_table(profiles: &[Profile]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header([
        "profile",
        "device",
        "cores/threads",
        "memory",
        "bandwidth",
        "SLO P99 TTFT/TPOT/E2E",
        "workload",
        "description",
    ]);
    for p in profiles {
        let mem = match p.gpu_memory_gib {
            Some(g) => format!("{} GiB + {} GiB GPU", p.memory_gib, g),
            None => format!("{} GiB", p.memory_gib),
        };
        let w = &p.workload;
        let load = match w.rate {
            Some(r) => format!("{r} req/s (cap {})", w.concurrency),
            None => format!("{} clients", w.concurrency),
        };
        t.add_row([
            p.name.clone(),
            p.device.name().to_string(),
            format!("{}/{}", p.cores, p.threads),
            mem,
            p.memory_bandwidth_gbs.map_or("-".into(), |b| format!("{b} GB/s")),
            format!("{} / {} / {} ms", p.slo.ttft_p99_ms, p.slo.tpot_p99_ms, p.slo.e2e_p99_ms),
            format!("{} in, {} out, {load}, {} requests", w.input_tokens, w.output_tokens, w.requests),
            p.description.clone(),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_profiles_parse() {
        let all = Profile::builtin();
        let names: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["rpi5", "n5105", "x86-4c8g", "jetson-orin-nano", "apple-m2", "l4", "a10g", "h100"]);
        assert_eq!(Profile::named("h100").unwrap().device, DeviceKind::Cuda);
        assert_eq!(Profile::named("apple-m2").unwrap().device, DeviceKind::Metal);
        assert_eq!(Profile::named("rpi5").unwrap().memory_bandwidth_gbs, Some(17.1));
        let table = list_table(&all).to_string();
        assert!(table.contains("jetson-orin-nano") && table.contains("3350 GB/s"), "{table}");
    }

    #[test]
    fn strict_parsing() {
        let good = BUILTIN[0].1;
        let e = Profile::parse(&format!("{good}\ncolour = 1\n"), "x.toml").unwrap_err().0;
        assert!(e.contains("unknown field `colour`"), "{e}");
        let e = Profile::parse(&good.replace("tpot_p99_ms", "tpot_ms"), "x.toml").unwrap_err().0;
        assert!(e.contains("tpot_ms"), "{e}");
        let e = Profile::parse(&good.replace("device = \"cpu\"", "device = \"tpu\""), "x.toml").unwrap_err().0;
        assert!(e.contains("tpu"), "{e}");
        let e = Profile::parse(&good.replace("concurrency = 2", "concurrency = 0"), "x.toml").unwrap_err().0;
        assert!(e.contains("at least 1"), "{e}");
        assert!(Profile::resolve("no-such-profile").unwrap_err().0.contains("shipped: rpi5"));
        assert!(Profile::resolve("/nonexistent/p.toml").is_err());
    }

    #[test]
    fn auto_and_baseline() {
        let m = LocalMachine { cores: 2, memory_gib: 24.0, available_gib: 20.0 };
        let p = Profile::auto(&m);
        assert_eq!((p.cores, p.threads, p.workload.concurrency), (2, 2, 2));
        assert!(p.check().is_ok());
        let b = Profile::named("x86-4c8g").unwrap().baseline(&m);
        assert_eq!(b["threads"].as_integer(), Some(2), "clamped to this machine's cores");
        assert!(LocalMachine::this().cores >= 1);
    }
}
