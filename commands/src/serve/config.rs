//! TGI's launcher variables (`MODEL_ID`, `PORT`, ...), `--config FILE.toml`: settings under the long flag
//! names with underscores (what `tgi tune` writes), and `--profile NAME`: the configuration `tgi tune` wrote for
//! that hardware profile (or the profile's baseline). A flag beats its `TGI_*` environment variable, which beats
//! TGI's variable, which beats the file, which beats the profile, which beats the default: each layer's values
//! are appended as flags for exactly the settings that came from neither the command line, the environment nor
//! an earlier layer, and the command line is parsed again.

use std::collections::HashSet;
use std::ffi::OsString;

use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, FromArgMatches};

use super::args::ServeArgs;
use crate::error::InputError;
use crate::profile::{tuned_path, LocalMachine, Profile};

/// TGI launcher variables and the settings they set here (TGI's `JSON_OUTPUT` switch is `log_format = json`;
/// `HF_TOKEN` needs no mapping: downloads read it as TGI does).
const TGI_VARIABLES: [(&str, &str); 16] = [
    ("MODEL_ID", "model"),
    ("REVISION", "revision"),
    ("PORT", "port"),
    ("HOSTNAME", "hostname"),
    ("MAX_INPUT_TOKENS", "max_input_tokens"),
    ("MAX_TOTAL_TOKENS", "max_total_tokens"),
    ("MAX_BATCH_PREFILL_TOKENS", "max_batch_prefill_tokens"),
    ("MAX_BATCH_TOTAL_TOKENS", "max_batch_total_tokens"),
    ("MAX_CONCURRENT_REQUESTS", "max_concurrent_requests"),
    ("QUANTIZE", "quantize"),
    ("SPECULATE", "speculate"),
    ("DTYPE", "dtype"),
    ("JSON_OUTPUT", "log_format"),
    ("API_KEY", "api_key"),
    ("LORA_ADAPTERS", "lora_adapters"),
    ("HF_TOKEN", ""),
];

/// The settings TGI's launcher variables in `env` give, as a layer, with the variables used; `host` is this
/// machine's name: a `HOSTNAME` equal to it is the one shells and containers set, not a setting.
fn tgi_variables(env: &dyn Fn(&str) -> Option<String>, host: Option<&str>) -> (toml::Table, Vec<&'static str>) {
    let mut table = toml::Table::new();
    let mut used = Vec::new();
    for (var, key) in TGI_VARIABLES {
        let Some(value) = env(var).filter(|v| !v.is_empty() && !key.is_empty()) else {
            continue;
        };
        let value = match var {
            "HOSTNAME" if host == Some(value.as_str()) => continue,
            "JSON_OUTPUT" => match value.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => "json".to_string(),
                _ => continue,
            },
            _ => value,
        };
        table.insert(key.to_string(), toml::Value::String(value));
        used.push(var);
    }
    (table, used)
}

/// This machine's host name, when the system says.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string())
}

/// Whether resolving `tgi serve`'s settings needs layers beyond the parsed command line: --config, --profile, or
/// a TGI launcher variable in the environment.
pub fn has_layers(args: &ServeArgs) -> bool {
    let env = |name: &str| std::env::var(name).ok();
    args.config.is_some() || args.profile.is_some() || !tgi_variables(&env, host_name().as_deref()).1.is_empty()
}

/// The serve arguments of the command line `argv` (`tgi serve ...`), with TGI's launcher variables, the `--config`
/// file and then the `--profile`'s tuned configuration (when given) filling in what the flags and the environment
/// left unset; with lines saying which layers were applied, for the startup log.
pub fn resolve(argv: &[OsString]) -> Result<(ServeArgs, Vec<String>)> {
    let env = |name: &str| std::env::var(name).ok();
    resolve_in(argv, &env, host_name().as_deref())
}

/// [`resolve`] with the environment `env` and the host name `host`.
fn resolve_in(
    argv: &[OsString],
    env: &dyn Fn(&str) -> Option<String>,
    host: Option<&str>,
) -> Result<(ServeArgs, Vec<String>)> {
    // `tgi serve ARGS` parsed as a command named `serve`.
    let argv: Vec<OsString> = argv.iter().skip(1).cloned().collect();
    let cmd = <ServeArgs as clap::Args>::augment_args(clap::Command::new("serve"));
    let given = cmd.clone().try_get_matches_from(&argv).map_err(|e| InputError(e.to_string()))?;
    let args = ServeArgs::from_arg_matches(&given).map_err(|e| InputError(e.to_string()))?;
    let mut layers = Vec::new();
    let mut notes = Vec::new();
    let (variables, used) = tgi_variables(env, host);
    if !used.is_empty() {
        let origin = format!("TGI's variables ({})", used.join(", "));
        notes.push(format!("{origin}: applied under the flags and TGI_* variables"));
        layers.push((origin, variables));
    }
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(|e| InputError(format!("{e:#}")))?;
        let table: toml::Table =
            text.parse().map_err(|e: toml::de::Error| InputError(format!("{}: {e}", path.display())))?;
        layers.push((path.display().to_string(), table));
    }
    if let Some(name) = &args.profile {
        let (origin, table, note) = profile_layer(name)?;
        notes.push(note);
        layers.push((origin, table));
    }
    if layers.is_empty() {
        return Ok((args, notes));
    }
    let mut full = argv;
    let mut taken = HashSet::new();
    for (origin, table) in &layers {
        let extra = file_flags(&cmd, &given, table, &taken).map_err(|e| InputError(format!("{origin}: {e}")))?;
        full.extend(extra);
        taken.extend(table.keys().cloned());
    }
    let origins: Vec<&str> = layers.iter().map(|(origin, _)| origin.as_str()).collect();
    let matches = cmd.try_get_matches_from(&full).map_err(|e| InputError(format!("{}: {e}", origins.join(", "))))?;
    let args = ServeArgs::from_arg_matches(&matches).map_err(|e| InputError(e.to_string()))?;
    Ok((args, notes))
}

/// `--profile NAME`: the tuned configuration when `tgi tune` wrote one, else the profile's baseline; with
/// where it came from and a line for the log.
fn profile_layer(name: &str) -> Result<(String, toml::Table, String), InputError> {
    let plain = !name.contains('/') && !name.ends_with(".toml");
    if let Some(path) = tuned_path(name).filter(|p| plain && p.is_file()) {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| InputError(format!("cannot read {origin}: {e}")))?;
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| InputError(format!("{origin}: {e}")))?;
        let note = format!("profile {name}: applying the tuned configuration {origin}");
        return Ok((origin, table, note));
    }
    let profile = Profile::resolve(name)?;
    let table = profile.baseline(&LocalMachine::this());
    let settings: Vec<String> = table.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    let where_ = tuned_path(&profile.name).map_or("no config directory".into(), |p| p.display().to_string());
    let note = format!(
        "profile {name}: no tuned configuration ({where_}; run tgi tune --profile {name}); applying the profile's baseline: {}",
        settings.join(", ")
    );
    Ok((format!("profile {name}"), table, note))
}

/// The file's settings as flags, for those not set on the command line, in the environment or in `taken`
/// (an earlier layer).
fn file_flags(
    serve: &clap::Command,
    given: &ArgMatches,
    table: &toml::Table,
    taken: &HashSet<String>,
) -> Result<Vec<OsString>, String> {
    let mut flags = Vec::new();
    for (key, value) in table {
        let long = key.replace('_', "-");
        let arg = serve
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && long != "config" && long != "profile")
            .ok_or_else(|| format!("unknown setting `{key}`"))?;
        let from = given.value_source(arg.get_id().as_str());
        if matches!(from, Some(ValueSource::CommandLine | ValueSource::EnvVariable)) || taken.contains(key) {
            continue;
        }
        let scalar = |v: &toml::Value| match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            other => Err(format!("`{key}`: expected a string, number or boolean, got {}", other.type_str())),
        };
        match (arg.get_action(), value) {
            (ArgAction::SetTrue, toml::Value::Boolean(true)) => flags.push(format!("--{long}").into()),
            (ArgAction::SetTrue, toml::Value::Boolean(false)) => {}
            (ArgAction::SetTrue, _) => return Err(format!("`{key}`: expected true or false")),
            (ArgAction::Append, toml::Value::Array(items)) => {
                for item in items {
                    flags.push(format!("--{long}={}", scalar(item)?).into());
                }
            }
            (_, v) => flags.push(format!("--{long}={}", scalar(v)?).into()),
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arguments `tgi serve EXTRA` resolve to.
    fn resolved(extra: &[&str]) -> Result<ServeArgs> {
        let argv: Vec<OsString> = ["tgi", "serve"].iter().chain(extra).map(OsString::from).collect();
        resolve(&argv).map(|(args, _)| args)
    }

    #[test]
    fn precedence_flag_env_file_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("serve.toml");
        std::fs::write(
            &file,
            "port = 4000\nmax_best_of = 3\nmax_stop_sequences = 6\nno_prefix_caching = true\n\
             cors_allow_origin = [\"http://a\", \"http://b\"]\nrequest_timeout = 2.5\nmodel = \"m.gguf\"\n",
        )
        .unwrap();
        let cfg = file.to_str().unwrap();
        // Only this test reads TGI_MAX_STOP_SEQUENCES.
        std::env::set_var("TGI_MAX_STOP_SEQUENCES", "7");
        let a = resolved(&["--config", cfg, "--max-best-of", "5"]).unwrap();
        std::env::remove_var("TGI_MAX_STOP_SEQUENCES");
        assert_eq!(a.max_best_of, 5, "flag beats file");
        assert_eq!(a.max_stop_sequences, 7, "environment beats file");
        assert_eq!(a.port, 4000, "file beats default");
        assert_eq!(a.max_top_n_tokens, 5, "default");
        assert!(a.no_prefix_caching);
        assert_eq!(a.cors_allow_origin, ["http://a", "http://b"]);
        assert_eq!(a.request_timeout, Some(2.5));
        assert_eq!(a.model.model.as_deref(), Some("m.gguf"));

        std::fs::write(&file, "prot = 1\n").unwrap();
        let e = resolved(&["--config", cfg]).unwrap_err().to_string();
        assert!(e.contains("unknown setting `prot`"), "{e}");
        std::fs::write(&file, "port = \"x\"\n").unwrap();
        assert!(resolved(&["--config", cfg]).is_err());
        std::fs::write(&file, "port = [1]\n").unwrap();
        assert!(resolved(&["--config", cfg]).is_err());
        assert!(resolved(&["--config", "/nonexistent.toml"]).is_err());
        assert_eq!(resolved(&[]).unwrap().port, 3000);
    }

    #[test]
    fn tgi_launcher_variables_reach_the_settings_under_flags() {
        let vars = [
            ("MODEL_ID", "org/model"),
            ("REVISION", "v1.0"),
            ("PORT", "8080"),
            ("HOSTNAME", "0.0.0.0"),
            ("MAX_INPUT_TOKENS", "100"),
            ("MAX_TOTAL_TOKENS", "200"),
            ("MAX_BATCH_PREFILL_TOKENS", "300"),
            ("MAX_BATCH_TOTAL_TOKENS", "4000"),
            ("MAX_CONCURRENT_REQUESTS", "7"),
            ("QUANTIZE", "bitsandbytes-nf4"),
            ("SPECULATE", "2"),
            ("DTYPE", "bfloat16"),
            ("JSON_OUTPUT", "true"),
            ("API_KEY", "secret"),
            ("LORA_ADAPTERS", "a=/x/a"),
            ("HF_TOKEN", "hf_x"),
        ];
        assert_eq!(vars.map(|(v, _)| v), TGI_VARIABLES.map(|(v, _)| v), "every variable is checked");
        let env = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
        let argv =
            |extra: &[&str]| -> Vec<OsString> { ["tgi", "serve"].iter().chain(extra).map(OsString::from).collect() };
        let (a, notes) = resolve_in(&argv(&[]), &env, Some("vm")).unwrap();
        assert_eq!((a.model.model.as_deref(), a.model.revision.as_deref()), (Some("org/model"), Some("v1.0")));
        assert_eq!((a.port, a.hostname.as_str()), (8080, "0.0.0.0"));
        assert_eq!((a.max_input_tokens, a.max_total_tokens), (Some(100), Some(200)));
        assert_eq!((a.max_batch_prefill_tokens, a.max_batch_total_tokens), (300, Some(4000)));
        assert_eq!((a.max_concurrent_requests, a.speculate), (7, Some(2)));
        assert_eq!(a.model.quantize.map(|q| q.to_string()).as_deref(), Some("nf4"));
        assert_eq!(a.model.dtype, Some(tgi_engines::device::ComputeDType::BF16));
        assert_eq!((a.log_format, a.api_key.as_deref()), (crate::serve::log::LogFormat::Json, Some("secret")));
        assert_eq!(a.lora_adapters.as_deref(), Some("a=/x/a"));
        assert!(notes[0].starts_with("TGI's variables (MODEL_ID, REVISION, PORT"), "{notes:?}");
        // A flag beats them; a HOSTNAME that is this machine's name is the shell's, not a setting.
        let (a, _) = resolve_in(&argv(&["--port", "9", "-m", "x.gguf"]), &env, Some("0.0.0.0")).unwrap();
        assert_eq!((a.port, a.model.model.as_deref(), a.hostname.as_str()), (9, Some("x.gguf"), "127.0.0.1"));
        // A bad value is refused, naming the variables.
        let bad = |name: &str| (name == "QUANTIZE").then(|| "bogus".to_string());
        let e = resolve_in(&argv(&[]), &bad, None).unwrap_err().to_string();
        assert!(e.contains("TGI's variables (QUANTIZE)") && e.contains("bogus"), "{e}");
        let nothing = |_: &str| None;
        assert!(resolve_in(&argv(&[]), &nothing, None).unwrap().1.is_empty());
    }

    #[test]
    fn profile_layer_under_config() {
        let dir = tempfile::tempdir().unwrap();
        // Only this test reads XDG_CONFIG_HOME.
        std::env::set_var("XDG_CONFIG_HOME", dir.path());
        let tuned = dir.path().join("tgi/tuned");
        std::fs::create_dir_all(&tuned).unwrap();
        std::fs::write(tuned.join("x86-4c8g.toml"), "threads = 1\nmax_batch_size = 7\nmax_best_of = 3\n").unwrap();
        let cfg = dir.path().join("serve.toml");
        std::fs::write(&cfg, "max_batch_size = 9\n").unwrap();
        let cfg = cfg.to_str().unwrap();
        let a = resolved(&["--profile", "x86-4c8g", "--config", cfg, "--max-best-of", "2"]).unwrap();
        assert_eq!(a.max_batch_size, Some(9), "--config beats the profile");
        assert_eq!(a.model.threads, Some(1), "the tuned profile beats the default");
        assert_eq!(a.max_best_of, 2, "a flag beats the profile");
        let a = resolved(&["--profile", "x86-4c8g", "--threads", "2"]).unwrap();
        assert_eq!((a.model.threads, a.max_batch_size), (Some(2), Some(7)));
        // No tuned file: the profile's baseline, its threads within this machine's cores.
        let a = resolved(&["--profile", "rpi5"]).unwrap();
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!((a.model.threads, a.max_batch_size), (Some(4.min(cores)), None));
        let argv: Vec<OsString> = ["tgi", "serve", "--profile", "x86-4c8g"].map(OsString::from).to_vec();
        let (_, notes) = resolve(&argv).unwrap();
        assert!(notes.len() == 1 && notes[0].contains("applying the tuned configuration"), "{notes:?}");
        let argv: Vec<OsString> = ["tgi", "serve", "--profile", "rpi5"].map(OsString::from).to_vec();
        let (_, notes) = resolve(&argv).unwrap();
        assert!(notes.len() == 1 && notes[0].contains("applying the profile's baseline: threads ="), "{notes:?}");
        let e = resolved(&["--profile", "nope"]).unwrap_err().to_string();
        assert!(e.contains("no profile 'nope'"), "{e}");
        std::fs::write(tuned.join("bad.toml"), "profile = \"x\"\n").unwrap();
        let e = resolved(&["--profile", "bad"]).unwrap_err().to_string();
        assert!(e.contains("unknown setting `profile`"), "{e}");
        std::env::remove_var("XDG_CONFIG_HOME");
    }
}
