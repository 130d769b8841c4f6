//! Resolving a `MODEL` argument to local files: a model directory, one `.safetensors` file, or an
//! `org/name` repo in the Hugging Face Hub cache (downloaded into it when online).

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use hf_hub::api::sync::{Api, ApiBuilder};
use hf_hub::{Cache, CacheRepo, Repo, RepoType};

use super::json::{read_json, Obj};
use super::HfError;

const CONFIG: &str = "config.json";
const WEIGHTS: &str = "model.safetensors";
const INDEX: &str = "model.safetensors.index.json";
const TOKENIZER: &str = "tokenizer.json";
const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
const GENERATION_CONFIG: &str = "generation_config.json";
/// Optional files fetched from the Hub when present (the chat template may live beside the tokenizer).
const OPTIONAL: [&str; 5] =
    [TOKENIZER, TOKENIZER_CONFIG, GENERATION_CONFIG, "chat_template.jinja", "chat_template.json"];
const PICKLE_ONLY: &str = ".bin only (PyTorch pickle) checkpoints are not supported, convert to safetensors";

/// A resolved local model: the directory or single file and what it contains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelFiles {
    /// The model directory (for a single weights file, the directory holding it).
    pub root: PathBuf,
    /// `config.json`.
    pub config: PathBuf,
    /// `model.safetensors`, or the shards `model.safetensors.index.json` names, in name order; all exist.
    pub weights: Vec<PathBuf>,
    /// `tokenizer.json`, when present.
    pub tokenizer_json: Option<PathBuf>,
    /// `tokenizer_config.json`, when present.
    pub tokenizer_config: Option<PathBuf>,
    /// `generation_config.json`, when present.
    pub generation_config: Option<PathBuf>,
}

/// Resolves `MODEL`: a local directory (or `.safetensors` file); else, if it looks like `org/name`,
/// that repo in the Hugging Face cache via `hf-hub`: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
/// `~/.cache/huggingface/hub`. With `HF_HUB_OFFLINE` set only the cache is used; otherwise missing
/// files are downloaded (`HF_TOKEN` and `HF_ENDPOINT` are honoured).
pub fn resolve(model: &str) -> Result<ModelFiles, HfError> {
    resolve_at(model, None)
}

/// As [`resolve`], at `revision` (a branch, tag or commit) of a hub repo instead of `main`; refused for a local
/// directory or file.
pub fn resolve_at(model: &str, revision: Option<&str>) -> Result<ModelFiles, HfError> {
    let path = Path::new(model);
    if path.exists() {
        return match revision {
            Some(rev) => {
                Err(invalid(path, format!("a local model has no revision ('{rev}'); revisions name hub commits")))
            }
            None => resolve_local(path),
        };
    }
    if !is_repo_id(model) {
        return Err(invalid(path, "no such file or directory"));
    }
    let revision = revision.unwrap_or(MAIN);
    if !is_revision(revision) {
        return Err(HfError::Hub {
            repo: model.to_string(),
            problem: format!("invalid revision '{revision}': expected a branch, tag or commit name"),
        });
    }
    resolve_hub(model, revision, &hub_cache_dir(model)?, hub_offline())
}

/// Whether `HF_HUB_OFFLINE` asks for the cache only.
pub(super) fn hub_offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// The revision a hub id means without one.
pub(super) const MAIN: &str = "main";

/// Whether `rev` can name a branch, tag or commit without leaving the cache's `refs/` directory.
fn is_revision(rev: &str) -> bool {
    !rev.is_empty()
        && rev.len() <= 256
        && rev.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
        && rev.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn invalid(path: &Path, problem: impl Into<String>) -> HfError {
    HfError::Invalid { path: path.to_path_buf(), problem: problem.into() }
}

/// Resolves a local model directory, or a `.safetensors` file with its `config.json` beside it.
fn resolve_local(path: &Path) -> Result<ModelFiles, HfError> {
    if path.is_file() {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        return match ext {
            "safetensors" => {
                let root = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                with_optional_files(root, vec![path.to_path_buf()])
            }
            "bin" | "pt" | "pth" => Err(invalid(path, PICKLE_ONLY)),
            _ => Err(invalid(path, "not a Hugging Face model directory or .safetensors file")),
        };
    }
    let index = path.join(INDEX);
    let weights = if index.is_file() {
        let mut shards = Vec::new();
        for name in shard_names(&index)? {
            let shard = path.join(&name);
            if !shard.is_file() {
                return Err(invalid(&index, format!("names shard '{name}', which does not exist")));
            }
            shards.push(shard);
        }
        shards
    } else if path.join(WEIGHTS).is_file() {
        vec![path.join(WEIGHTS)]
    } else if has_pickle_weights(path)? {
        return Err(invalid(path, PICKLE_ONLY));
    } else {
        return Err(invalid(path, format!("no {WEIGHTS} or {INDEX}")));
    };
    with_optional_files(path, weights)
}

/// Completes [`ModelFiles`] for `root`: `config.json` is required, the rest optional.
fn with_optional_files(root: &Path, weights: Vec<PathBuf>) -> Result<ModelFiles, HfError> {
    let config = root.join(CONFIG);
    if !config.is_file() {
        return Err(invalid(root, "no config.json; not a Hugging Face model directory"));
    }
    let optional = |name: &str| Some(root.join(name)).filter(|p| p.is_file());
    Ok(ModelFiles {
        root: root.to_path_buf(),
        config,
        weights,
        tokenizer_json: optional(TOKENIZER),
        tokenizer_config: optional(TOKENIZER_CONFIG),
        generation_config: optional(GENERATION_CONFIG),
    })
}

/// The distinct shard file names of a safetensors index, sorted; names must stay inside the directory.
fn shard_names(index: &Path) -> Result<BTreeSet<String>, HfError> {
    let value = read_json(index)?;
    let root = Obj::root(index, &value)?;
    let map = root.object("weight_map")?.ok_or_else(|| root.error("weight_map", "missing"))?;
    let mut names = BTreeSet::new();
    for (tensor, file) in map.entries() {
        let name = file.as_str().ok_or_else(|| map.error(tensor, "expected a file name"))?;
        if !Path::new(name).components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(map.error(tensor, format!("shard '{name}' is not a plain file name")));
        }
        names.insert(name.to_string());
    }
    if names.is_empty() {
        return Err(root.error("weight_map", "is empty"));
    }
    Ok(names)
}

/// Whether a directory holds PyTorch pickle weights (`*.bin`, `*.pt`, `*.pth`).
fn has_pickle_weights(dir: &Path) -> Result<bool, HfError> {
    let entries = std::fs::read_dir(dir).map_err(|source| HfError::Io { path: dir.to_path_buf(), source })?;
    Ok(entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.ends_with(".bin") || name.ends_with(".pt") || name.ends_with(".pth")
    }))
}

/// Whether `model` looks like a Hub repo id `org/name`.
pub(super) fn is_repo_id(model: &str) -> bool {
    let valid = |part: &str| {
        !part.is_empty()
            && !part.starts_with(['.', '-'])
            && !part.contains("..")
            && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    matches!(model.split_once('/'), Some((org, name)) if valid(org) && valid(name))
}

/// The hub cache directory, as huggingface_hub locates it.
pub(super) fn hub_cache_dir(repo: &str) -> Result<PathBuf, HfError> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("HF_HUB_CACHE") {
        return Ok(dir);
    }
    if let Some(home) = var("HF_HOME") {
        return Ok(home.join("hub"));
    }
    var("HOME").map(|home| home.join(".cache/huggingface/hub")).ok_or_else(|| HfError::Hub {
        repo: repo.to_string(),
        problem: "cannot locate the Hugging Face cache; set HF_HOME".into(),
    })
}

/// Resolves `repo` at `revision` from the hub cache at `cache_dir`, downloading missing files unless `offline`.
fn resolve_hub(repo: &str, revision: &str, cache_dir: &Path, offline: bool) -> Result<ModelFiles, HfError> {
    let cache = Cache::new(cache_dir.to_path_buf());
    let at = Repo::with_revision(repo.to_string(), RepoType::Model, revision.to_string());
    let cached = cache.repo(at.clone());
    let missing = missing_in_cache(&cached)?;
    // Online, a cached snapshot is used as is when it also has the tokenizer.
    let complete = missing.is_empty() && (offline || cached.get(TOKENIZER).is_some());
    if complete {
        let config = cached.get(CONFIG).expect("checked by missing_in_cache");
        return resolve_local(config.parent().expect("a file in a snapshot directory"));
    }
    if offline {
        return Err(HfError::Hub {
            repo: repo.to_string(),
            problem: format!(
                "HF_HUB_OFFLINE is set and the cache {} lacks {}",
                cache_dir.display(),
                missing.join(", ")
            ),
        });
    }
    download(repo, at, cache)
}

/// The required files (config, weights) of the cached snapshot `refs/main` points to that are absent.
fn missing_in_cache(cached: &CacheRepo) -> Result<Vec<String>, HfError> {
    let mut missing = Vec::new();
    if cached.get(CONFIG).is_none() {
        missing.push(CONFIG.to_string());
    }
    if let Some(index) = cached.get(INDEX) {
        missing.extend(shard_names(&index)?.into_iter().filter(|s| cached.get(s).is_none()));
    } else if cached.get(WEIGHTS).is_none() {
        missing.push(format!("{WEIGHTS} (or {INDEX} and its shards)"));
    }
    Ok(missing)
}

/// The hub client over `cache`, with `HF_TOKEN` and `HF_ENDPOINT` applied.
pub(super) fn hub_api(repo: &str, cache: &Cache) -> Result<Api, HfError> {
    let mut builder = ApiBuilder::from_cache(cache.clone());
    if let Ok(token) = std::env::var("HF_TOKEN") {
        builder = builder.with_token(Some(token));
    }
    if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
        builder = builder.with_endpoint(endpoint);
    }
    builder.build().map_err(|e| HfError::Hub { repo: repo.to_string(), problem: e.to_string() })
}

/// Downloads config, weights and the optional files of `repo` (at the revision `at` names) into `cache`, then
/// resolves the snapshot.
fn download(repo: &str, at: Repo, cache: Cache) -> Result<ModelFiles, HfError> {
    let hub = |problem: String| HfError::Hub { repo: repo.to_string(), problem };
    let remote = hub_api(repo, &cache)?.repo(at.clone());
    let info = remote.info().map_err(|e| {
        hub(format!("cannot list the repo ({e}); check the name, the network, or HF_TOKEN for gated models"))
    })?;
    // Pin refs/REVISION to the listed commit so every file lands in one snapshot directory.
    let cached = cache.repo(at);
    cached.create_ref(&info.sha).map_err(|e| hub(format!("cannot write to the cache: {e}")))?;
    let files: BTreeSet<&str> = info.siblings.iter().map(|s| s.rfilename.as_str()).collect();
    let fetch = |name: &str| remote.get(name).map_err(|e| hub(format!("downloading {name}: {e}")));
    if !files.contains(CONFIG) {
        return Err(hub("the repo has no config.json; not a transformers model".into()));
    }
    let config = fetch(CONFIG)?;
    if files.contains(INDEX) {
        for shard in shard_names(&fetch(INDEX)?)? {
            fetch(&shard)?;
        }
    } else if files.contains(WEIGHTS) {
        fetch(WEIGHTS)?;
    } else if files.iter().any(|f| f.ends_with(".bin") || f.ends_with(".pt") || f.ends_with(".pth")) {
        return Err(hub(PICKLE_ONLY.into()));
    } else {
        return Err(hub(format!("the repo has no {WEIGHTS} or {INDEX}")));
    }
    for name in OPTIONAL.into_iter().filter(|n| files.contains(n)) {
        fetch(name)?;
    }
    resolve_local(config.parent().expect("a file in a snapshot directory"))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::fs;

    const STORIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/hf");

    fn err(result: Result<ModelFiles, HfError>) -> String {
        result.unwrap_err().to_string()
    }

    /// A directory with the given files (each containing `{}`).
    fn dir_with(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for f in files {
            fs::write(dir.path().join(f), "{}").unwrap();
        }
        dir
    }

    #[test]
    fn stories260k_directory() {
        let root = Path::new(STORIES);
        let files = resolve(STORIES).unwrap();
        assert_eq!(
            files,
            ModelFiles {
                root: root.to_path_buf(),
                config: root.join("config.json"),
                weights: vec![root.join("model.safetensors")],
                tokenizer_json: Some(root.join("tokenizer.json")),
                tokenizer_config: Some(root.join("tokenizer_config.json")),
                generation_config: Some(root.join("generation_config.json")),
            }
        );
    }

    #[test]
    fn single_safetensors_file() {
        let dir = dir_with(&["config.json", "weights.safetensors"]);
        let file = dir.path().join("weights.safetensors");
        let files = resolve(file.to_str().unwrap()).unwrap();
        assert_eq!((files.root.as_path(), files.weights), (dir.path(), vec![file]));
        assert_eq!(files.tokenizer_json, None);
        let lone = dir_with(&["w.safetensors"]);
        let msg = err(resolve(lone.path().join("w.safetensors").to_str().unwrap()));
        assert!(msg.ends_with("no config.json; not a Hugging Face model directory"), "{msg}");
    }

    #[test]
    fn sharded_index() {
        let dir = dir_with(&["config.json", "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"]);
        let index = r#"{"metadata": {"total_size": 8}, "weight_map": {"b": "model-00002-of-00002.safetensors",
            "a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}}"#;
        fs::write(dir.path().join(INDEX), index).unwrap();
        let files = resolve(dir.path().to_str().unwrap()).unwrap();
        let names: Vec<_> = files.weights.iter().map(|p| p.file_name().unwrap().to_str().unwrap()).collect();
        assert_eq!(names, ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]);

        fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
        let msg = err(resolve(dir.path().to_str().unwrap()));
        let expected = format!(
            "{}: names shard 'model-00002-of-00002.safetensors', which does not exist",
            dir.path().join(INDEX).display()
        );
        assert_eq!(msg, expected);

        fs::write(dir.path().join(INDEX), r#"{"weight_map": {"a": "../x.safetensors"}}"#).unwrap();
        assert!(err(resolve(dir.path().to_str().unwrap())).contains("field 'weight_map.a': shard '../x.safetensors'"));
        fs::write(dir.path().join(INDEX), r#"{"metadata": {}}"#).unwrap();
        assert!(err(resolve(dir.path().to_str().unwrap())).contains("field 'weight_map': missing"));
    }

    #[test]
    fn local_errors() {
        let msg = err(resolve("./no/such/dir"));
        assert_eq!(msg, "./no/such/dir: no such file or directory");
        let empty = dir_with(&[]);
        let msg = err(resolve(empty.path().to_str().unwrap()));
        assert_eq!(msg, format!("{}: no {WEIGHTS} or {INDEX}", empty.path().display()));
        let no_config = dir_with(&["model.safetensors"]);
        let msg = err(resolve(no_config.path().to_str().unwrap()));
        assert!(msg.ends_with(": no config.json; not a Hugging Face model directory"), "{msg}");
        let pickle = dir_with(&["config.json", "pytorch_model.bin"]);
        let msg = err(resolve(pickle.path().to_str().unwrap()));
        assert_eq!(msg, format!("{}: {PICKLE_ONLY}", pickle.path().display()));
        let msg = err(resolve(pickle.path().join("pytorch_model.bin").to_str().unwrap()));
        assert!(msg.ends_with(PICKLE_ONLY), "{msg}");
        let msg = err(resolve(pickle.path().join("config.json").to_str().unwrap()));
        assert!(msg.ends_with("not a Hugging Face model directory or .safetensors file"), "{msg}");
    }

    #[test]
    fn repo_ids() {
        for id in ["meta-llama/Llama-3.2-1B", "Qwen/Qwen2.5-0.5B-Instruct", "a/b_c"] {
            assert!(is_repo_id(id), "{id}");
        }
        for id in ["gpt2", "./a/b", "a/b/c", "/abs/x", "a/", "../x", "a/..b", "a b/c", ".a/b"] {
            assert!(!is_repo_id(id), "{id}");
        }
    }

    /// Lays out `models--org--name` as hf-hub does: blobs, snapshots/<rev>/ symlinks, refs/main.
    pub(in crate::hf) fn fake_cache(files: &[&str]) -> tempfile::TempDir {
        let cache = tempfile::tempdir().unwrap();
        let repo = cache.path().join("models--org--name");
        let snapshot = repo.join("snapshots/0123abcd");
        fs::create_dir_all(&snapshot).unwrap();
        fs::create_dir_all(repo.join("blobs")).unwrap();
        fs::create_dir_all(repo.join("refs")).unwrap();
        fs::write(repo.join("refs/main"), "0123abcd").unwrap();
        for (i, f) in files.iter().enumerate() {
            let blob = repo.join(format!("blobs/{i:040x}"));
            fs::write(&blob, "{}").unwrap();
            std::os::unix::fs::symlink(Path::new("../../blobs").join(blob.file_name().unwrap()), snapshot.join(f))
                .unwrap();
        }
        cache
    }

    #[test]
    fn hub_cache_offline() {
        let cache = fake_cache(&["config.json", "model.safetensors", "tokenizer.json", "generation_config.json"]);
        let files = resolve_hub("org/name", MAIN, cache.path(), true).unwrap();
        let snapshot = cache.path().join("models--org--name/snapshots/0123abcd");
        assert_eq!(files.root, snapshot);
        assert_eq!(files.weights, vec![snapshot.join("model.safetensors")]);
        assert_eq!(files.tokenizer_json, Some(snapshot.join("tokenizer.json")));
        assert_eq!(files.tokenizer_config, None);
        // Complete with the tokenizer: used online too, without the network.
        assert_eq!(resolve_hub("org/name", MAIN, cache.path(), false).unwrap(), files);
        // Another revision is another ref: a tag pointing at the same snapshot resolves to it, an unknown one is
        // missing from the cache.
        let refs = cache.path().join("models--org--name/refs");
        fs::write(refs.join("v1.0"), "0123abcd").unwrap();
        assert_eq!(resolve_hub("org/name", "v1.0", cache.path(), true).unwrap(), files);
        assert!(err(resolve_hub("org/name", "v2.0", cache.path(), true)).contains("lacks config.json"));
    }

    #[test]
    fn revisions_stay_inside_the_cache_and_local_models_have_none() {
        for good in ["main", "v1.0", "refs/pr/1", "0123abcd"] {
            assert!(is_revision(good), "{good}");
        }
        for bad in ["", "../x", "a/../../b", "/abs", "a//b", "a b", "a\\b"] {
            assert!(!is_revision(bad), "{bad}");
        }
        assert!(err(resolve_at("org/name", Some("../up"))).contains("invalid revision '../up'"));
        assert!(err(resolve_at(STORIES, Some("main"))).contains("a local model has no revision"));
    }

    #[test]
    fn hub_cache_offline_missing_files() {
        let cache = fake_cache(&["tokenizer.json"]);
        let msg = err(resolve_hub("org/name", MAIN, cache.path(), true));
        let expected = format!(
            "Hugging Face Hub model 'org/name': HF_HUB_OFFLINE is set and the cache {} lacks config.json, \
             {WEIGHTS} (or {INDEX} and its shards)",
            cache.path().display()
        );
        assert_eq!(msg, expected);

        let cache = fake_cache(&["config.json", INDEX, "model-00001-of-00002.safetensors"]);
        let index = cache.path().join(format!("models--org--name/blobs/{:040x}", 1));
        fs::write(
            index,
            r#"{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        let msg = err(resolve_hub("org/name", MAIN, cache.path(), true));
        assert!(msg.ends_with("lacks model-00002-of-00002.safetensors"), "{msg}");

        let empty = tempfile::tempdir().unwrap();
        assert!(err(resolve_hub("org/other", MAIN, empty.path(), true)).contains("lacks config.json"));
    }

    /// The only test that touches HF_* variables (process-global): `resolve` reads them.
    #[test]
    fn resolve_through_hf_home() {
        let home = tempfile::tempdir().unwrap();
        let cache = fake_cache(&["config.json", "model.safetensors"]);
        fs::rename(cache.path(), home.path().join("hub")).unwrap();
        std::env::remove_var("HF_HUB_CACHE");
        std::env::set_var("HF_HOME", home.path());
        std::env::set_var("HF_HUB_OFFLINE", "1");
        let files = resolve("org/name").unwrap();
        assert_eq!(files.root, home.path().join("hub/models--org--name/snapshots/0123abcd"));
        let msg = err(resolve("org/missing"));
        assert!(msg.starts_with("Hugging Face Hub model 'org/missing': HF_HUB_OFFLINE is set"), "{msg}");
    }
}
