//! The search space: the serving parameters tune varies, a configuration (a value per parameter,
//! absent meaning serve's default), and how one becomes `tgi serve` flags and a `--config` TOML.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use tgi_engines::convert::preset::Preset;
use tgi_engines::kv::KvDType;

/// A parameter of `tgi serve` that tune varies, in coordinate-descent order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Param {
    /// `--threads`.
    Threads,
    /// `--max-batch-size`.
    MaxBatchSize,
    /// `--max-batch-prefill-tokens` (prefill chunk).
    MaxBatchPrefillTokens,
    /// `--max-batch-total-tokens` (KV budget).
    MaxBatchTotalTokens,
    /// `--waiting-served-ratio`.
    WaitingServedRatio,
    /// `--kv-cache-dtype`.
    KvCacheDtype,
    /// `--speculate N --speculate-type ngram`, or none.
    Speculate,
    /// The model quantized by `tgi quantize --type T` (cached), or `none` for the model as given.
    Quantize,
}

impl Param {
    /// Every parameter, in search order.
    pub const ALL: [Param; 8] = [
        Param::Threads,
        Param::MaxBatchSize,
        Param::MaxBatchPrefillTokens,
        Param::MaxBatchTotalTokens,
        Param::WaitingServedRatio,
        Param::KvCacheDtype,
        Param::Speculate,
        Param::Quantize,
    ];

    /// The setting's name (the long flag with underscores).
    pub fn name(self) -> &'static str {
        match self {
            Param::Threads => "threads",
            Param::MaxBatchSize => "max_batch_size",
            Param::MaxBatchPrefillTokens => "max_batch_prefill_tokens",
            Param::MaxBatchTotalTokens => "max_batch_total_tokens",
            Param::WaitingServedRatio => "waiting_served_ratio",
            Param::KvCacheDtype => "kv_cache_dtype",
            Param::Speculate => "speculate",
            Param::Quantize => "quantize",
        }
    }

    /// Checks one value of a sweep list and puts it in canonical form; `default`/`none` mean serve's default.
    pub fn parse_value(self, v: &str) -> Result<Value, String> {
        let v = v.trim();
        if v == "default" || (v == "none" && matches!(self, Param::Speculate | Param::Quantize)) {
            return Ok(Value::Default);
        }
        let bad = |what: &str| Err(format!("--{}: '{v}' is not {what}", self.name().replace('_', "-")));
        match self {
            Param::Threads | Param::MaxBatchSize | Param::MaxBatchPrefillTokens | Param::MaxBatchTotalTokens => {
                match v.parse::<usize>() {
                    Ok(n) if n > 0 => Ok(Value::Set(n.to_string())),
                    _ => bad("a positive integer or 'default'"),
                }
            }
            Param::WaitingServedRatio => match v.parse::<f32>() {
                Ok(r) if r.is_finite() && r >= 0.0 => Ok(Value::Set(r.to_string())),
                _ => bad("a ratio (0 or more) or 'default'"),
            },
            Param::KvCacheDtype => match v.parse::<KvDType>() {
                Ok(t) => Ok(Value::Set(t.name().to_string())),
                Err(_) => {
                    let names: Vec<&str> = KvDType::ALL.iter().map(|t| t.name()).collect();
                    bad(&format!("a KV cache type ({}) or 'default'", names.join(", ")))
                }
            },
            Param::Speculate => match v.strip_prefix("ngram:").map(str::parse::<usize>) {
                Some(Ok(n)) if n > 0 => Ok(Value::Set(format!("ngram:{n}"))),
                _ => bad("'none' or ngram:N (N draft tokens)"),
            },
            Param::Quantize => match v.parse::<Preset>() {
                Ok(p) if !p.needs_imatrix() => Ok(Value::Set(p.name().to_string())),
                _ => {
                    let names: Vec<&str> =
                        Preset::ALL.iter().filter(|p| !p.needs_imatrix()).map(|p| p.name()).collect();
                    bad(&format!("'none' or a tgi quantize type ({})", names.join(", ")))
                }
            },
        }
    }
}

/// One parameter's value in a configuration.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// Serve's default (no flag); `none` for speculation and quantization.
    Default,
    /// This value (canonical text).
    Set(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Default => f.write_str("default"),
            Value::Set(s) => f.write_str(s),
        }
    }
}

/// A configuration: the parameters that differ from serve's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Config(pub BTreeMap<Param, String>);

impl Config {
    /// The value of `p`.
    pub fn get(&self, p: Param) -> Value {
        self.0.get(&p).map_or(Value::Default, |v| Value::Set(v.clone()))
    }

    /// This configuration with `p` set to `v`.
    pub fn with(&self, p: Param, v: &Value) -> Config {
        let mut c = self.clone();
        match v {
            Value::Default => c.0.remove(&p),
            Value::Set(s) => c.0.insert(p, s.clone()),
        };
        c
    }

    /// The quantization type, when one is set.
    pub fn quantize(&self) -> Option<&str> {
        self.0.get(&Param::Quantize).map(String::as_str)
    }

    /// The `tgi serve` flags (the model is chosen by the caller from [`Config::quantize`]).
    pub fn serve_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (p, v) in &self.0 {
            match p {
                Param::Quantize => {}
                Param::Speculate => {
                    let n = v.strip_prefix("ngram:").unwrap_or(v);
                    args.extend([format!("--speculate={n}"), "--speculate-type=ngram".into()]);
                }
                _ => args.push(format!("--{}={v}", p.name().replace('_', "-"))),
            }
        }
        args
    }

    /// The settings as `tgi serve --config` reads them (long flag names with underscores).
    pub fn toml(&self) -> toml::Table {
        let mut t = toml::Table::new();
        for (p, v) in &self.0 {
            let value = match p {
                Param::Quantize => continue,
                Param::Speculate => {
                    let n = v.strip_prefix("ngram:").unwrap_or(v);
                    t.insert("speculate_type".into(), toml::Value::String("ngram".into()));
                    toml::Value::Integer(n.parse().unwrap_or(1))
                }
                Param::WaitingServedRatio => toml::Value::Float(v.parse().unwrap_or(0.3)),
                Param::KvCacheDtype => toml::Value::String(v.clone()),
                _ => toml::Value::Integer(v.parse().unwrap_or(1)),
            };
            t.insert(p.name().into(), value);
        }
        t
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("serve defaults");
        }
        let parts: Vec<String> = self.0.iter().map(|(p, v)| format!("{}={v}", p.name())).collect();
        f.write_str(&parts.join(" "))
    }
}

/// The values swept per parameter, in search order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Space(pub Vec<(Param, Vec<Value>)>);

impl Space {
    /// Number of configurations in the full grid.
    pub fn grid_size(&self) -> usize {
        self.0.iter().map(|(_, v)| v.len().max(1)).product()
    }

    /// Every configuration of the grid over `base`.
    pub fn grid(&self, base: &Config) -> Vec<Config> {
        let mut out = vec![base.clone()];
        for (p, values) in &self.0 {
            out = out.iter().flat_map(|c| values.iter().map(move |v| c.with(*p, v))).collect();
        }
        out
    }
}

/// Parses a sweep list (`1,2,4`) of `p`, dropping repeats.
pub fn parse_list(p: Param, list: &str) -> Result<Vec<Value>, String> {
    let mut out: Vec<Value> = Vec::new();
    for v in list.split(',') {
        let v = p.parse_value(v)?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_flags_and_toml() {
        assert_eq!(parse_list(Param::Threads, "1,2,1,default").unwrap().len(), 3);
        assert!(parse_list(Param::Threads, "0").unwrap_err().contains("--threads"));
        let err = parse_list(Param::KvCacheDtype, "f16,q4").unwrap_err();
        assert!(err.contains("(f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) or 'default'"), "{err}");
        assert_eq!(parse_list(Param::KvCacheDtype, "IQ4_NL").unwrap(), vec![Value::Set("iq4_nl".into())]);
        assert!(parse_list(Param::Speculate, "ngram").is_err());
        assert!(parse_list(Param::Quantize, "q3").unwrap_err().contains("q4_k_m"));
        assert_eq!(parse_list(Param::Quantize, "none,q8_0").unwrap()[1], Value::Set("q8_0".into()));
        let c = Config::default()
            .with(Param::Threads, &Value::Set("2".into()))
            .with(Param::Speculate, &Value::Set("ngram:4".into()))
            .with(Param::WaitingServedRatio, &Value::Set("1.5".into()))
            .with(Param::Quantize, &Value::Set("q8_0".into()));
        assert_eq!(
            c.serve_args(),
            ["--threads=2", "--waiting-served-ratio=1.5", "--speculate=4", "--speculate-type=ngram"]
        );
        let t = c.toml();
        assert_eq!(t["threads"].as_integer(), Some(2));
        assert_eq!(t["speculate"].as_integer(), Some(4));
        assert_eq!(t["speculate_type"].as_str(), Some("ngram"));
        assert_eq!(t["waiting_served_ratio"].as_float(), Some(1.5));
        assert!(!t.contains_key("quantize"));
        assert_eq!(c.to_string(), "threads=2 waiting_served_ratio=1.5 speculate=ngram:4 quantize=q8_0");
        assert_eq!(c.with(Param::Threads, &Value::Default).get(Param::Threads), Value::Default);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), c);
    }

    #[test]
    fn grid() {
        let s = Space(vec![
            (Param::Threads, parse_list(Param::Threads, "1,2").unwrap()),
            (Param::MaxBatchSize, parse_list(Param::MaxBatchSize, "1,4,8").unwrap()),
        ]);
        assert_eq!(s.grid_size(), 6);
        let g = s.grid(&Config::default());
        assert_eq!(g.len(), 6);
        assert!(g.contains(
            &Config::default()
                .with(Param::Threads, &Value::Set("2".into()))
                .with(Param::MaxBatchSize, &Value::Set("8".into()))
        ));
    }
}
