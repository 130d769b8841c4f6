//! llama-quantize's habits: `--type` in any case (`Q8_0`), and the positional form `IN [OUT] TYPE [THREADS]`.

use std::path::PathBuf;

use clap::builder::{PossibleValue, TypedValueParser};
use tgi_engines::convert::preset::Preset;

use super::QuantizeArgs;
use crate::error::InputError;

/// `--type`: a preset in any case, with llama-quantize's aliases; a number (`-t 8`, threads elsewhere) is
/// refused with a pointer to --threads.
#[derive(Clone, Copy, Debug)]
pub(super) struct PresetParser;

impl TypedValueParser for PresetParser {
    type Value = Preset;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Preset, clap::Error> {
        let text = value.to_string_lossy();
        parse_preset(&text).map_err(|e| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("--type: {e}\n")).with_cmd(cmd)
        })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(Preset::ALL.iter().map(|p| PossibleValue::new(p.name()))))
    }
}

/// A preset by name (any case, aliases included), or why not.
fn parse_preset(text: &str) -> Result<Preset, String> {
    if text.parse::<u32>().is_ok() {
        return Err(format!(
            "'{text}' is a number, and -t is --type here (the GGUF type, e.g. q4_k_m), as in llama-quantize's \
             positional TYPE; threads are --threads {text}"
        ));
    }
    text.parse::<Preset>()
}

/// What llama-quantize's positional arguments give: the output, the type and the threads.
type Positional = (Option<PathBuf>, Option<Preset>, Option<usize>);

/// llama-quantize's positional arguments after the model, `[OUTPUT] TYPE [THREADS]` (a first value that is a
/// type starts `TYPE [THREADS]`).
fn positional(values: &[String]) -> Result<Positional, InputError> {
    let threads =
        |t: &str| t.parse::<usize>().map_err(|_| InputError(format!("'{t}': expected a thread count after the type")));
    let preset = |t: &str| parse_preset(t).map_err(|e| InputError(format!("TYPE: {e}")));
    Ok(match values {
        [] => (None, None, None),
        [ty] => (None, Some(preset(ty)?), None),
        [first, second] if parse_preset(first).is_ok() => (None, Some(preset(first)?), Some(threads(second)?)),
        [out, ty] => (Some(PathBuf::from(out)), Some(preset(ty)?), None),
        [out, ty, n] => (Some(PathBuf::from(out)), Some(preset(ty)?), Some(threads(n)?)),
        _ => return Err(InputError("at most three values follow the model: [OUTPUT] TYPE [THREADS]".into())),
    })
}

impl QuantizeArgs {
    /// Folds llama-quantize's positional form into -o, --type and --threads; each may be given one way only.
    pub(super) fn with_positional(mut self) -> Result<Self, InputError> {
        let (output, preset, threads) = positional(&self.positional)?;
        let twice = |flag: &str| InputError(format!("{flag} is given twice: as a flag and in the positional form"));
        if output.is_some() {
            if self.output.is_some() {
                return Err(twice("the output (-o)"));
            }
            self.output = output;
        }
        if preset.is_some() {
            if self.preset.is_some() {
                return Err(twice("the type (--type)"));
            }
            self.preset = preset;
        }
        if threads.is_some() {
            if self.threads.is_some() {
                return Err(twice("the threads (--threads)"));
            }
            self.threads = threads;
        }
        self.positional.clear();
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn types_in_any_case_and_numbers_pointed_at_threads() {
        assert_eq!(parse_preset("Q8_0"), Ok(Preset::Q8_0));
        assert_eq!(parse_preset("q4_k"), Ok(Preset::Q4_K_M));
        assert_eq!(parse_preset("Q4_K_M"), Ok(Preset::Q4_K_M));
        let e = parse_preset("8").unwrap_err();
        assert!(e.contains("-t is --type here") && e.contains("--threads 8"), "{e}");
        assert!(parse_preset("q9").unwrap_err().contains("expected one of"));
    }

    #[test]
    fn llama_quantize_positional_form() {
        let out = Some(PathBuf::from("out.gguf"));
        assert_eq!(positional(&strings(&["Q8_0"])).unwrap(), (None, Some(Preset::Q8_0), None));
        assert_eq!(positional(&strings(&["out.gguf", "Q8_0"])).unwrap(), (out.clone(), Some(Preset::Q8_0), None));
        assert_eq!(positional(&strings(&["q4_k", "8"])).unwrap(), (None, Some(Preset::Q4_K_M), Some(8)));
        assert_eq!(positional(&strings(&["out.gguf", "q6_k", "4"])).unwrap(), (out, Some(Preset::Q6_K), Some(4)));
        assert!(positional(&strings(&["out.gguf", "bogus"])).unwrap_err().0.contains("TYPE"));
        assert!(positional(&strings(&["out.gguf", "q8_0", "x"])).unwrap_err().0.contains("thread count"));
    }
}
