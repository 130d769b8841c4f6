//! `--config FILE.toml`: settings under the long flag names with underscores (what `tgi tune`
//! writes). A flag beats its `TGI_*` environment variable, which beats the file, which beats the
//! default: the file's values are appended as flags for exactly the settings that came from neither
//! the command line nor the environment, and the command line is parsed again.

use std::ffi::OsString;

use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, FromArgMatches};

use super::args::ServeArgs;
use crate::error::InputError;

/// The serve arguments of the command line `argv` (`tgi serve ...`), with the `--config` file
/// (when given) filling in what the flags and the environment left unset.
pub fn resolve(argv: Vec<OsString>) -> Result<ServeArgs> {
    // `tgi serve ARGS` parsed as a command named `serve`.
    let argv: Vec<OsString> = argv.into_iter().skip(1).collect();
    let cmd = <ServeArgs as clap::Args>::augment_args(clap::Command::new("serve"));
    let given = cmd.clone().try_get_matches_from(&argv).map_err(|e| InputError(e.to_string()))?;
    let args = ServeArgs::from_arg_matches(&given).map_err(|e| InputError(e.to_string()))?;
    let Some(path) = &args.config else { return Ok(args) };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(|e| InputError(format!("{e:#}")))?;
    let extra = file_flags(&cmd, &given, &text).map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    let mut full = argv;
    full.extend(extra);
    let matches = cmd.try_get_matches_from(&full).map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    ServeArgs::from_arg_matches(&matches).map_err(|e| InputError(e.to_string()).into())
}

/// The file's settings as flags, for those not set on the command line or in the environment.
fn file_flags(serve: &clap::Command, given: &ArgMatches, text: &str) -> Result<Vec<OsString>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut flags = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let arg = serve
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && long != "config")
            .ok_or_else(|| format!("unknown setting `{key}`"))?;
        let from = given.value_source(arg.get_id().as_str());
        if matches!(from, Some(ValueSource::CommandLine | ValueSource::EnvVariable)) {
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

    fn argv(extra: &[&str]) -> Vec<OsString> {
        ["tgi", "serve"].iter().chain(extra).map(OsString::from).collect()
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
        let a = resolve(argv(&["--config", cfg, "--max-best-of", "5"])).unwrap();
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
        let e = resolve(argv(&["--config", cfg])).unwrap_err().to_string();
        assert!(e.contains("unknown setting `prot`"), "{e}");
        std::fs::write(&file, "port = \"x\"\n").unwrap();
        assert!(resolve(argv(&["--config", cfg])).is_err());
        std::fs::write(&file, "port = [1]\n").unwrap();
        assert!(resolve(argv(&["--config", cfg])).is_err());
        assert!(resolve(argv(&["--config", "/nonexistent.toml"])).is_err());
        assert_eq!(resolve(argv(&[])).unwrap().port, 3000);
    }
}
