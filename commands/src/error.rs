//! Exit codes: 2 for bad input or usage, 1 for internal failures.

use tgi_engines::convert::ConvertError;
use tgi_formats::gguf::GgufError;
use tgi_formats::hf::HfError;
use tgi_formats::safetensors::SafetensorsError;
use tgi_formats::source::SourceError;

/// An error caused by what the user asked for or gave as input (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

/// The process exit code for an error: 2 when any cause is bad input, else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    let input = err.chain().any(|e| {
        e.is::<InputError>()
            || e.downcast_ref::<GgufError>().is_some_and(|g| !matches!(g, GgufError::Write(_)))
            || e.is::<HfError>()
            || e.is::<SafetensorsError>()
            || e.is::<SourceError>()
            || e.downcast_ref::<ConvertError>().is_some_and(|c| !matches!(c, ConvertError::Quant(_)))
    });
    if input {
        2
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(exit_code(&anyhow::Error::new(InputError("bad".into())).context("while x")), 2);
        assert_eq!(exit_code(&anyhow::anyhow!("boom")), 1);
        let io = std::io::Error::other("disk");
        assert_eq!(exit_code(&anyhow::Error::new(io)), 1);
    }
}
