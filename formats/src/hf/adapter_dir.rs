//! Resolving a LoRA adapter argument to local files: a local PEFT directory or `.gguf` file as given; else, if it
//! looks like `org/name`, that hub repo's PEFT adapter (`adapter_config.json`, `adapter_model.safetensors`) in the
//! Hugging Face cache, found and downloaded exactly as [`super::resolve`] finds models.

use std::path::{Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};

use super::model_dir::{hub_api, hub_cache_dir, hub_offline, is_repo_id, MAIN};
use super::HfError;
use crate::peft::{CONFIG_FILE, WEIGHTS_FILE};

/// The files a hub adapter must have.
const FILES: [&str; 2] = [CONFIG_FILE, WEIGHTS_FILE];

/// The local path of the adapter `spec` names: `spec` itself when it exists or is no hub id (the loader then
/// says what is missing), else the cache snapshot of hub repo `spec` holding its PEFT files (downloaded unless
/// `HF_HUB_OFFLINE` is set; `HF_HUB_CACHE`, `HF_HOME`, `HF_TOKEN` and `HF_ENDPOINT` are honoured).
pub fn resolve_adapter(spec: &str) -> Result<PathBuf, HfError> {
    let path = Path::new(spec);
    if path.exists() || !is_repo_id(spec) {
        return Ok(path.to_path_buf());
    }
    resolve_hub_adapter(spec, &hub_cache_dir(spec)?, hub_offline())
}

/// The snapshot directory of `repo`'s adapter files in the cache at `cache_dir`, downloading the missing ones
/// unless `offline`.
fn resolve_hub_adapter(repo: &str, cache_dir: &Path, offline: bool) -> Result<PathBuf, HfError> {
    let hub = |problem: String| HfError::Hub { repo: repo.to_string(), problem };
    let cache = Cache::new(cache_dir.to_path_buf());
    let at = Repo::with_revision(repo.to_string(), RepoType::Model, MAIN.to_string());
    let cached = cache.repo(at.clone());
    let missing: Vec<&str> = FILES.into_iter().filter(|f| cached.get(f).is_none()).collect();
    let in_snapshot = |file: PathBuf| file.parent().map(Path::to_path_buf).ok_or_else(|| hub("bad snapshot".into()));
    if missing.is_empty() {
        return in_snapshot(cached.get(CONFIG_FILE).expect("checked above"));
    }
    if offline {
        return Err(hub(format!(
            "HF_HUB_OFFLINE is set and the cache {} lacks the adapter's {}",
            cache_dir.display(),
            missing.join(", ")
        )));
    }
    let remote = hub_api(repo, &cache)?.repo(at);
    let mut dir = None;
    for name in FILES {
        let file = remote.get(name).map_err(|e| {
            hub(format!("downloading {name}: {e} (a PEFT LoRA adapter repo holds {CONFIG_FILE} and {WEIGHTS_FILE})"))
        })?;
        dir = Some(in_snapshot(file)?);
    }
    Ok(dir.expect("FILES is not empty"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf::model_dir::tests::fake_cache;

    #[test]
    fn hub_ids_resolve_to_the_cached_snapshot() {
        let cache = fake_cache(&[CONFIG_FILE, WEIGHTS_FILE]);
        let dir = resolve_hub_adapter("org/name", cache.path(), true).unwrap();
        assert_eq!(dir, cache.path().join("models--org--name/snapshots/0123abcd"));
        assert!(dir.join(WEIGHTS_FILE).is_file());
        let partial = fake_cache(&[CONFIG_FILE]);
        let e = resolve_hub_adapter("org/name", partial.path(), true).unwrap_err().to_string();
        assert!(
            e.contains("HF_HUB_OFFLINE is set") && e.ends_with(&format!("lacks the adapter's {WEIGHTS_FILE}")),
            "{e}"
        );
    }

    #[test]
    fn local_paths_and_non_ids_pass_through() {
        let here = env!("CARGO_MANIFEST_DIR");
        assert_eq!(resolve_adapter(here).unwrap(), PathBuf::from(here));
        assert_eq!(resolve_adapter("/no/such/adapter").unwrap(), PathBuf::from("/no/such/adapter"));
        assert_eq!(resolve_adapter("adapter.gguf").unwrap(), PathBuf::from("adapter.gguf"));
    }
}
