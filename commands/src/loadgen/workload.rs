//! What to send: prompts from a file (plain lines, JSONL, ShareGPT) or synthetic prompts of a given token
//! length, built with the target's tokenizer (a local one, or the server's `/tokenize`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hyper::Method;
use serde_json::Value;
use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::GgufFile;

use super::args::{DatasetFormat, TokenCount};
use super::arrivals::Rng;
use super::client::api::Prompt;
use super::client::http::Endpoint;
use crate::error::InputError;

/// Output tokens when neither the file nor `--output-tokens` says.
const DEFAULT_OUTPUT_TOKENS: u64 = 128;

/// Words synthetic prompts are drawn from (common English, so every tokenizer splits them sensibly).
const WORDS: &[&str] = &[
    "the", "a", "little", "girl", "boy", "went", "to", "park", "and", "saw", "big", "red", "ball", "dog", "cat",
    "tree", "house", "sun", "was", "happy", "sad", "played", "with", "her", "his", "friend", "mom", "dad", "said",
    "one", "day", "time", "upon", "once", "there", "lived", "in", "small", "town", "near", "river", "every", "morning",
    "bird", "sang", "song", "they", "ran", "fast", "slow", "jumped", "over", "under", "box", "found", "toy", "car",
    "blue", "green", "sky", "water", "food", "ate", "apple", "cake", "bed", "night", "moon", "star", "looked", "at",
    "it", "he", "she", "we", "you", "like", "loved", "wanted", "new", "old", "good", "bad", "after", "before", "then",
    "because", "so", "but", "very", "not", "is", "on", "of", "for", "from", "up", "down",
];

/// How to count tokens.
pub enum Counter {
    /// A tokenizer loaded here.
    Local(Box<Tokenizer>),
    /// The server's TGI-style `/tokenize`.
    Server(std::sync::Arc<Endpoint>),
}

/// Loads `--tokenizer`: a tokenizer.json, a model directory holding one, a GGUF file, or a hub id found in
/// the local Hugging Face cache (never downloaded).
pub fn load_tokenizer(spec: &str) -> Result<Tokenizer> {
    let path = Path::new(spec);
    let bad = |e: &dyn std::fmt::Display| InputError(format!("--tokenizer {spec}: {e}"));
    let json = if path.is_dir() {
        path.join("tokenizer.json")
    } else if path.is_file() {
        if path.extension().is_some_and(|e| e == "gguf") {
            let file = GgufFile::open(path).map_err(|e| bad(&e))?;
            return Tokenizer::from_gguf(&file).map_err(|e| bad(&e).into());
        }
        path.to_path_buf()
    } else if spec.split('/').count() == 2 && !spec.starts_with('.') {
        hub_tokenizer(spec).ok_or_else(|| bad(&"not a file or directory, and not in the Hugging Face cache"))?
    } else {
        return Err(bad(&"no such file or directory").into());
    };
    if !json.is_file() {
        return Err(bad(&format!("{} not found", json.display())).into());
    }
    Tokenizer::from_tokenizer_json(&json).map_err(|e| bad(&e).into())
}

/// `tokenizer.json` of hub repo `id` in the local cache (`HF_HUB_CACHE`, `HF_HOME/hub` or `~/.cache/huggingface/hub`).
fn hub_tokenizer(id: &str) -> Option<PathBuf> {
    let var = |n| std::env::var_os(n).filter(|v| !v.is_empty()).map(PathBuf::from);
    let cache = var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/huggingface/hub")))?;
    let repo = cache.join(format!("models--{}", id.replace('/', "--")));
    let rev = std::fs::read_to_string(repo.join("refs/main")).ok()?;
    Some(repo.join("snapshots").join(rev.trim()).join("tokenizer.json")).filter(|p| p.is_file())
}

impl Counter {
    /// Tokens of `text` (no special tokens added).
    async fn count(&self, text: &str) -> Result<u64> {
        Ok(self.tokens(text).await?.len() as u64)
    }

    /// Token ids (local) or end offsets (server) of `text`, one per token.
    async fn tokens(&self, text: &str) -> Result<Vec<usize>> {
        match self {
            Counter::Local(t) => {
                let ids = t.encode(text, false, false).map_err(|e| anyhow::anyhow!("{e}"))?;
                Ok(ids.into_iter().map(|id| id as usize).collect())
            }
            Counter::Server(e) => {
                let body = serde_json::json!({"inputs": text, "add_special_tokens": false}).to_string();
                let (status, answer) =
                    e.call(Method::POST, "/tokenize", body.into_bytes()).await.map_err(|(_, m)| anyhow::anyhow!(m))?;
                let tokens: Vec<Value> =
                    (status == 200).then(|| serde_json::from_str(&answer).ok()).flatten().ok_or_else(|| {
                        InputError(format!(
                            "the server's /tokenize did not answer a TGI token list (HTTP {status}); pass --tokenizer"
                        ))
                    })?;
                Ok(tokens.iter().filter_map(|t| t.get("stop").and_then(Value::as_u64)).map(|s| s as usize).collect())
            }
        }
    }

    /// The text of the first `n` tokens of `text`.
    async fn prefix(&self, text: &str, n: usize) -> Result<String> {
        let tokens = self.tokens(text).await?;
        let n = n.min(tokens.len());
        match self {
            Counter::Local(t) => {
                let ids: Vec<u32> = tokens[..n].iter().map(|&id| id as u32).collect();
                Ok(t.decode(&ids, true).map_err(|e| anyhow::anyhow!("{e}"))?.trim().to_string())
            }
            Counter::Server(_) => {
                let mut cut = tokens.get(n.wrapping_sub(1)).copied().unwrap_or(0).min(text.len());
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                Ok(text[..cut].trim().to_string())
            }
        }
    }

    /// A prompt of exactly `n` tokens (as this counter counts them), different for each `rng` state.
    async fn synthetic(&self, n: u64, rng: &mut Rng) -> Result<(String, u64)> {
        let mut text = String::new();
        let mut target = n as usize;
        while text.len() < 8 * target + 16 {
            text.push_str(WORDS[rng.range(0, WORDS.len() as u64 - 1) as usize]);
            text.push(' ');
        }
        let mut best = (text.clone(), self.count(&text).await?);
        for _ in 0..8 {
            let candidate = self.prefix(&text, target).await?;
            let got = self.count(&candidate).await?;
            if got.abs_diff(n) < best.1.abs_diff(n) {
                best = (candidate, got);
            }
            if got == n {
                break;
            }
            target = (target as i64 + n as i64 - got as i64).max(1) as usize;
        }
        Ok(best)
    }
}

/// The workload flags.
pub struct Spec<'a> {
    /// `--prompt-file`.
    pub file: Option<&'a Path>,
    /// `--dataset`.
    pub format: DatasetFormat,
    /// `--input-tokens`.
    pub input: TokenCount,
    /// `--output-tokens`.
    pub output: Option<TokenCount>,
    /// `--seed`.
    pub seed: u64,
}

/// Builds `pool` prompts (fewer when a file has fewer).
pub async fn build(spec: &Spec<'_>, counter: Option<&Counter>, pool: usize) -> Result<Vec<Prompt>> {
    let mut rng = Rng::new(spec.seed ^ 0x5eed);
    let draw = |c: TokenCount, rng: &mut Rng| rng.range(c.mean - c.spread, c.mean + c.spread);
    let mut prompts = Vec::with_capacity(pool);
    match spec.file {
        None => {
            let counter = counter.ok_or_else(|| {
                InputError(
                    "synthetic prompts need a tokenizer: pass --tokenizer (tokenizer.json, model dir, GGUF or hub id), \
                     use a server with /tokenize, or give --prompt-file"
                        .into(),
                )
            })?;
            for _ in 0..pool {
                let n = draw(spec.input, &mut rng);
                let (text, got) = counter.synthetic(n, &mut rng).await?;
                let max_tokens = spec.output.map_or(DEFAULT_OUTPUT_TOKENS, |o| draw(o, &mut rng));
                prompts.push(Prompt { text, input_tokens: Some(got), max_tokens });
            }
        }
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| InputError(format!("--prompt-file {}: {e}", path.display())))?;
            let entries = parse_file(&text, spec.format).map_err(|m| InputError(format!("{}: {m}", path.display())))?;
            for e in entries.into_iter().take(pool) {
                let input_tokens = match counter {
                    Some(Counter::Local(_)) => Some(counter.expect("matched").count(&e.prompt).await?),
                    _ => None,
                };
                let from_reply = match (&e.reply, counter) {
                    (Some(r), Some(c)) => Some(c.count(r).await?.max(1)),
                    _ => None,
                };
                let max_tokens = match spec.output {
                    Some(o) => draw(o, &mut rng),
                    None => e.max_tokens.or(from_reply).unwrap_or(DEFAULT_OUTPUT_TOKENS),
                };
                prompts.push(Prompt { text: e.prompt, input_tokens, max_tokens });
            }
        }
    }
    Ok(prompts)
}

/// One prompt read from a file.
#[derive(Debug, PartialEq)]
struct Entry {
    prompt: String,
    max_tokens: Option<u64>,
    /// ShareGPT's reply, whose length sets the output length (as vLLM's benchmark does).
    reply: Option<String>,
}

fn parse_file(text: &str, format: DatasetFormat) -> Result<Vec<Entry>, String> {
    let format = match format {
        DatasetFormat::Auto if text.trim_start().starts_with('[') => DatasetFormat::Sharegpt,
        DatasetFormat::Auto if text.trim_start().starts_with('{') => DatasetFormat::Jsonl,
        DatasetFormat::Auto => DatasetFormat::Lines,
        f => f,
    };
    let entries = match format {
        DatasetFormat::Lines | DatasetFormat::Auto => text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| Entry { prompt: l.to_string(), max_tokens: None, reply: None })
            .collect(),
        DatasetFormat::Jsonl => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| jsonl_entry(l).map_err(|m| format!("line {}: {m}", i + 1)))
            .collect::<Result<Vec<_>, _>>()?,
        DatasetFormat::Sharegpt => sharegpt(text)?,
    };
    if entries.is_empty() {
        return Err("no prompts in the file".into());
    }
    Ok(entries)
}

fn jsonl_entry(line: &str) -> Result<Entry, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let prompt = ["prompt", "text", "inputs"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .ok_or("no \"prompt\" (or \"text\", \"inputs\") string")?;
    let max_tokens = ["max_tokens", "output_tokens", "max_new_tokens"]
        .iter()
        .find_map(|k| v.get(*k))
        .map(|m| m.as_u64().filter(|&n| n > 0).ok_or_else(|| format!("max_tokens {m} is not a positive integer")));
    Ok(Entry { prompt: prompt.to_string(), max_tokens: max_tokens.transpose()?, reply: None })
}

fn sharegpt(text: &str) -> Result<Vec<Entry>, String> {
    let v: Vec<Value> = serde_json::from_str(text).map_err(|e| format!("not a ShareGPT JSON array: {e}"))?;
    let turn = |c: &Value| c.get("value").or_else(|| c.get("content")).and_then(Value::as_str).map(str::to_string);
    Ok(v.iter()
        .filter_map(|item| {
            let conv = item.get("conversations").or_else(|| item.get("conversation"))?.as_array()?;
            let (prompt, reply) = (turn(conv.first()?)?, turn(conv.get(1)?)?);
            (!prompt.trim().is_empty()).then_some(Entry { prompt, max_tokens: None, reply: Some(reply) })
        })
        .collect())
}

/// Reads the local tokenizer or falls back to the server's `/tokenize` (checked with one call).
pub async fn counter(
    tokenizer: Option<&str>,
    server: std::sync::Arc<Endpoint>,
    api_is_tgi_like: bool,
) -> Result<Option<Counter>> {
    if let Some(spec) = tokenizer {
        return Ok(Some(Counter::Local(Box::new(load_tokenizer(spec)?))));
    }
    if !api_is_tgi_like {
        return Ok(None);
    }
    let c = Counter::Server(server);
    Ok(c.count("hello world").await.context("probing /tokenize").ok().map(|_| c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_files() {
        let lines = parse_file("a\n\n b \n", DatasetFormat::Auto).unwrap();
        assert_eq!(lines.iter().map(|e| e.prompt.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        let j = parse_file("{\"prompt\": \"x\", \"max_tokens\": 7}\n{\"text\": \"y\"}\n", DatasetFormat::Auto).unwrap();
        assert_eq!(j[0], Entry { prompt: "x".into(), max_tokens: Some(7), reply: None });
        assert_eq!(j[1].max_tokens, None);
        assert!(parse_file("{\"prompt\": 3}", DatasetFormat::Jsonl).unwrap_err().contains("line 1"));
        let sg = r#"[{"id":"1","conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":"hello there"}]},
                     {"id":"2","conversations":[{"from":"human","value":"alone"}]}]"#;
        let s = parse_file(sg, DatasetFormat::Auto).unwrap();
        assert_eq!((s.len(), s[0].reply.as_deref()), (1, Some("hello there")));
        assert!(parse_file("", DatasetFormat::Lines).is_err());
    }

    #[tokio::test]
    async fn synthetic_prompts_have_the_asked_length() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k/hf");
        let t = load_tokenizer(dir.to_str().unwrap()).unwrap();
        let c = Counter::Local(Box::new(t));
        let spec = Spec {
            file: None,
            format: DatasetFormat::Auto,
            input: "40:10".parse().unwrap(),
            output: Some("16".parse().unwrap()),
            seed: 1,
        };
        let p = build(&spec, Some(&c), 20).await.unwrap();
        for x in &p {
            let n = x.input_tokens.unwrap();
            assert!((30..=50).contains(&n), "{n}");
            assert_eq!(c.count(&x.text).await.unwrap(), n);
            assert_eq!(x.max_tokens, 16);
        }
        assert!(p.windows(2).all(|w| w[0].text != w[1].text));
        assert!(load_tokenizer("/nonexistent").is_err());
    }
}
