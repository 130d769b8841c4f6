//! The LoRA adapters a server holds beside its base model: loaded at start (`--lora-adapters`) or at run time
//! (`POST /v1/load_lora_adapter`), looked up by name per request, evicted least recently used beyond
//! `--max-loras` (never one a request holds), and counted for `/info` and `/metrics`.

use std::sync::{Arc, Mutex, PoisonError};

use serde::Deserialize;
use tgi_engines::lora::{LoraAdapter, LoraUse};
use tgi_engines::model::DecoderConfig;
use tgi_formats::hf;

use hyper::StatusCode;
use serde::Serialize;

use super::body::{self, HttpResponse};
use super::error::ApiError;
use super::state::AppState;

/// The adapters and the base they run on.
#[derive(Debug)]
pub struct Loras {
    /// The base's shapes, which adapters must fit (`None` without a model: nothing loads).
    base: Option<DecoderConfig>,
    /// Most adapters held at once.
    pub max_loras: usize,
    /// Highest rank accepted.
    pub max_rank: usize,
    /// Memory held back from the KV cache for adapters (`/info`).
    pub reserved_bytes: u64,
    held: Mutex<Held>,
}

/// The adapters in load order (llama-server's `lora` ids index it), and the counters.
#[derive(Debug, Default)]
struct Held {
    adapters: Vec<Entry>,
    /// Ticks once per load or request: what "recently used" compares.
    clock: u64,
    /// Adapters evicted to make room.
    evictions: u64,
}

/// One adapter and the requests it served.
#[derive(Debug)]
struct Entry {
    adapter: Arc<LoraAdapter>,
    requests: u64,
    /// The clock at its last load or request.
    used: u64,
}

/// A held adapter as `/info` and `/metrics` show it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdapterInfo {
    /// Its name.
    pub name: String,
    /// Where it was loaded from.
    pub path: String,
    /// Its rank.
    pub rank: usize,
    /// The memory its factors take.
    pub bytes: usize,
    /// Seconds loading took.
    pub load_seconds: f64,
    /// Requests that ran on it.
    pub requests: u64,
}

/// `POST /v1/load_lora_adapter` (vLLM's body).
#[derive(Debug, Deserialize)]
pub struct LoadBody {
    /// The name requests will use.
    pub lora_name: String,
    /// The adapter: a PEFT directory or llama.cpp `.gguf` adapter on the server's file system, or a hub id.
    pub lora_path: String,
}

/// `POST /v1/unload_lora_adapter` (vLLM's body; its `lora_int_id` is ignored).
#[derive(Debug, Deserialize)]
pub struct UnloadBody {
    /// The adapter's name.
    pub lora_name: String,
}

impl Loras {
    /// No adapters yet, for a base of `base`.
    pub fn new(base: Option<DecoderConfig>, max_loras: usize, max_rank: usize) -> Self {
        Loras { base, max_loras, max_rank, reserved_bytes: 0, held: Mutex::default() }
    }

    /// The same, showing `bytes` held back from the KV cache for adapters.
    pub fn with_reserved(self, bytes: u64) -> Self {
        Loras { reserved_bytes: bytes, ..self }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Loads the adapter at `path` as `name`, evicting the least recently used idle adapter when `--max-loras`
    /// are held; a bad adapter or a taken name is refused and nothing changes.
    pub fn load(&self, name: &str, path: &str) -> Result<AdapterInfo, ApiError> {
        let refuse = |m: String| ApiError::Adapter(m);
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.:/@".contains(c);
        if name.is_empty() || name.len() > 256 || !name.chars().all(allowed) {
            return Err(refuse(format!("adapter name {name:?}: 1 to 256 letters, digits and - _ . : / @")));
        }
        let Some(base) = &self.base else { return Err(refuse("this server has no model to adapt".into())) };
        if self.held().adapters.iter().any(|e| e.adapter.name() == name) {
            return Err(refuse(format!("an adapter named '{name}' is already loaded; unload it first")));
        }
        // Read outside the lock: requests keep resolving adapters meanwhile. A hub id resolves as models do.
        let dir = hf::resolve_adapter(path).map_err(|e| refuse(e.to_string()))?;
        let adapter = LoraAdapter::load(name, &dir, base, self.max_rank).map_err(|e| refuse(e.to_string()))?;
        let mut held = self.held();
        if held.adapters.iter().any(|e| e.adapter.name() == name) {
            return Err(refuse(format!("an adapter named '{name}' is already loaded; unload it first")));
        }
        if held.adapters.len() >= self.max_loras {
            // Idle: no request holds it (the list holds the only reference).
            let idle = held.adapters.iter().enumerate().filter(|(_, e)| Arc::strong_count(&e.adapter) == 1);
            let Some((i, _)) = idle.min_by_key(|(_, e)| e.used) else {
                return Err(ApiError::AdaptersBusy(self.max_loras));
            };
            let gone = held.adapters.remove(i);
            held.evictions += 1;
            tracing::info!(adapter = gone.adapter.name(), "evicted the least recently used idle LoRA adapter");
        }
        tracing::info!(
            adapter = name,
            path,
            rank = adapter.rank(),
            bytes = adapter.bytes(),
            ms = adapter.load_time().as_millis() as u64,
            "LoRA adapter loaded"
        );
        held.clock += 1;
        let entry = Entry { adapter: Arc::new(adapter), requests: 0, used: held.clock };
        let info = entry.info();
        held.adapters.push(entry);
        Ok(info)
    }

    /// Unloads `name`; requests running on it finish on it, new ones no longer find it.
    pub fn unload(&self, name: &str) -> Result<(), ApiError> {
        let mut held = self.held();
        let i = held.adapters.iter().position(|e| e.adapter.name() == name);
        let i = i.ok_or_else(|| ApiError::UnknownModel(name.to_string()))?;
        held.adapters.remove(i);
        tracing::info!(adapter = name, "LoRA adapter unloaded");
        Ok(())
    }

    /// The adapter TGI's `adapter_id` names: `None` for the base model (`base_id`, empty, or absent), else the
    /// adapter, now the most recently used; an unknown name is a 404.
    pub fn resolve(&self, id: Option<&str>, base_id: &str) -> Result<Option<LoraUse>, ApiError> {
        let Some(name) = id.filter(|m| !m.is_empty() && *m != base_id) else { return Ok(None) };
        self.take(name, 1.0).map(Some).ok_or_else(|| ApiError::UnknownModel(name.to_string()))
    }

    /// The adapter OpenAI's `model` names, if it names one: any other name is the served model (TGI answers
    /// every `model` with it, and clients send names such as "tgi").
    pub fn by_model(&self, model: Option<&str>) -> Option<LoraUse> {
        self.take(model?, 1.0)
    }

    /// The adapter `name` at `scale`, now the most recently used, counted as one more request.
    fn take(&self, name: &str, scale: f32) -> Option<LoraUse> {
        let mut held = self.held();
        held.clock += 1;
        let clock = held.clock;
        let e = held.adapters.iter_mut().find(|e| e.adapter.name() == name)?;
        e.requests += 1;
        e.used = clock;
        Some(LoraUse { adapter: e.adapter.clone(), scale })
    }

    /// llama-server's `lora` field: the one adapter with a non-zero scale, by index in [`Loras::list`] order or by
    /// name; every scale 0 is the base.
    pub fn resolve_list(&self, list: &[LoraField], base_id: &str) -> Result<Option<LoraUse>, ApiError> {
        let on: Vec<&LoraField> = list.iter().filter(|f| f.scale != 0.0).collect();
        let field = match on[..] {
            [] => return Ok(None),
            [one] => one,
            _ => return Err(ApiError::Adapter("`lora`: one adapter per request (the others at scale 0)".into())),
        };
        if !field.scale.is_finite() || field.scale.abs() > 100.0 {
            return Err(ApiError::Adapter(format!("`lora`: scale {} is outside [-100, 100]", field.scale)));
        }
        let name = match &field.id {
            LoraId::Name(n) => n.clone(),
            LoraId::Index(i) => {
                let names = self.list();
                let name = names.get(*i as usize).map(|a| a.name.clone());
                name.ok_or_else(|| ApiError::UnknownModel(format!("lora id {i}")))?
            }
        };
        if name == base_id {
            return Ok(None);
        }
        self.take(&name, field.scale as f32).map(Some).ok_or(ApiError::UnknownModel(name))
    }

    /// The held adapters, in load order.
    pub fn list(&self) -> Vec<AdapterInfo> {
        self.held().adapters.iter().map(Entry::info).collect()
    }

    /// Adapters evicted so far.
    pub fn evictions(&self) -> u64 {
        self.held().evictions
    }
}

impl Entry {
    fn info(&self) -> AdapterInfo {
        let a = &self.adapter;
        AdapterInfo {
            name: a.name().to_string(),
            path: a.path().display().to_string(),
            rank: a.rank(),
            bytes: a.bytes(),
            load_seconds: a.load_time().as_secs_f64(),
            requests: self.requests,
        }
    }
}

/// `POST /v1/load_lora_adapter`: reads the adapter off the I/O threads; 200 with the adapter, or 422 (bad adapter,
/// taken name), 503 (every slot in use) and nothing loaded.
pub async fn load(state: &Arc<AppState>, req: LoadBody) -> Result<HttpResponse, ApiError> {
    let loras = state.loras.clone();
    let info = tokio::task::spawn_blocking(move || loras.load(&req.lora_name, &req.lora_path))
        .await
        .map_err(|e| ApiError::Adapter(format!("loading stopped: {e}")))??;
    Ok(body::json(StatusCode::OK, &info))
}

/// `POST /v1/unload_lora_adapter`: 200, or 404 for a name not held.
pub fn unload(state: &AppState, req: UnloadBody) -> Result<HttpResponse, ApiError> {
    state.loras.unload(&req.lora_name)?;
    Ok(body::json(StatusCode::OK, &serde_json::json!({ "unloaded": req.lora_name })))
}

/// One entry of llama-server's `lora` field.
#[derive(Clone, Debug, Deserialize)]
pub struct LoraField {
    /// The adapter: its index in `/v1/models`' adapter order, or its name.
    pub id: LoraId,
    /// The factor on the adapter's scale (0: off).
    pub scale: f64,
}

/// An adapter's index or name.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum LoraId {
    /// Index in the adapter list (any non-negative JSON integer; those past `u64` saturate, and are unknown).
    #[serde(deserialize_with = "any_index")]
    Index(u64),
    /// Name.
    Name(String),
}

/// A non-negative JSON integer as an index: one written as a float (`2.0`) or too large for `u64`
/// (`1e30`, `123456789012345678901234`) is still an integer by the API's schema, and saturates.
fn any_index<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    n.as_u64()
        .or_else(|| n.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0).map(|f| f as u64))
        .ok_or_else(|| serde::de::Error::custom("an adapter index is a non-negative integer"))
}

/// Parses `--lora-adapters`: `name=path` pairs separated by commas (a bare path is named after its last
/// component, as TGI does with hub ids).
pub fn parse_adapters(spec: &str) -> Result<Vec<(String, String)>, String> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| match item.split_once('=') {
            Some((name, path)) if !name.is_empty() && !path.is_empty() => Ok((name.to_string(), path.to_string())),
            Some(_) => Err(format!("'{item}': expected name=path")),
            None => {
                let name = item.trim_end_matches('/').rsplit('/').next().unwrap_or(item);
                Ok((name.to_string(), item.to_string()))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_past_u64_are_indices_that_saturate() {
        let field: LoraField = serde_json::from_str(r#"{"id": 5265771406063034859257856, "scale": 1}"#).unwrap();
        assert!(matches!(field.id, LoraId::Index(u64::MAX)));
        let field: LoraField = serde_json::from_str(r#"{"id": 2.0, "scale": 1}"#).unwrap();
        assert!(matches!(field.id, LoraId::Index(2)));
        let field: LoraField = serde_json::from_str(r#"{"id": "kd", "scale": 1}"#).unwrap();
        assert!(matches!(field.id, LoraId::Name(ref n) if n == "kd"));
        assert!(serde_json::from_str::<LoraField>(r#"{"id": -1, "scale": 1}"#).is_err());
        assert!(serde_json::from_str::<LoraField>(r#"{"id": 1.5, "scale": 1}"#).is_err());
    }

    #[test]
    fn adapter_lists_parse_as_tgi_writes_them() {
        assert_eq!(
            parse_adapters("a=/x/a, b=rel/b,/y/c/").unwrap(),
            vec![("a".into(), "/x/a".into()), ("b".into(), "rel/b".into()), ("c".into(), "/y/c/".into())]
        );
        assert!(parse_adapters("=x").unwrap_err().contains("name=path"));
        assert!(parse_adapters("").unwrap().is_empty());
    }

    #[test]
    fn without_a_model_nothing_loads_and_unknown_names_are_404() {
        let l = Loras::new(None, 2, 64);
        assert!(matches!(l.load("a", "/x"), Err(ApiError::Adapter(_))));
        assert!(matches!(l.resolve(Some("a"), "base"), Err(ApiError::UnknownModel(_))));
        assert!(l.resolve(Some("base"), "base").unwrap().is_none());
        assert!(l.resolve(None, "base").unwrap().is_none());
        assert!(l.by_model(Some("gpt-4")).is_none());
        assert!(matches!(l.unload("a"), Err(ApiError::UnknownModel(_))));
        let zero = [LoraField { id: LoraId::Index(0), scale: 0.0 }];
        assert!(l.resolve_list(&zero, "base").unwrap().is_none());
        let two = [LoraField { id: LoraId::Index(0), scale: 1.0 }, LoraField { id: LoraId::Index(1), scale: 0.5 }];
        assert!(matches!(l.resolve_list(&two, "base"), Err(ApiError::Adapter(_))));
    }

    #[test]
    fn eviction_takes_the_least_recently_used_idle_adapter_never_one_in_use() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let hf = tgi_formats::hf::ModelConfig::from_file(&root.join("models/stories260k/hf/config.json")).unwrap();
        let l = Loras::new(Some(DecoderConfig::from_hf(&hf).unwrap()), 2, 64);
        let path = |n: &str| root.join("tests/reference/lora").join(n).display().to_string();
        let names = |l: &Loras| l.list().into_iter().map(|a| a.name).collect::<Vec<_>>();
        l.load("a", &path("s260k-qv-r4")).unwrap();
        l.load("b", &path("s260k-mlp-r2")).unwrap();
        let running = l.by_model(Some("a")).unwrap(); // `a` is in use
        drop(l.by_model(Some("b"))); // `b` is used after `a`, and idle again
        l.load("c", &path("s260k-kd-r16")).unwrap();
        assert_eq!(names(&l), ["a", "c"], "`a`, the least recently used, runs: `b` goes");
        let busy = l.by_model(Some("c")).unwrap();
        assert!(matches!(l.load("d", &path("s260k-qv-r4")), Err(ApiError::AdaptersBusy(2))));
        assert_eq!(names(&l), ["a", "c"], "nothing loaded");
        drop((running, busy));
        l.load("d", &path("s260k-qv-r4")).unwrap();
        assert_eq!((names(&l), l.evictions()), (vec!["c".to_string(), "d".to_string()], 2));
    }
}
