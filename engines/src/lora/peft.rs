//! A PEFT adapter directory's factors placed on the base: `adapter_config.json` validated, every tensor of
//! `adapter_model.safetensors` named as a layer's projection.

use std::path::Path;

use tgi_formats::peft::{AdapterConfig, LoraTensorName, WEIGHTS_FILE};
use tgi_formats::{SafetensorsSet, SourceError, TensorSource};

use super::adapter::{Layout, LoraError, Stored};
use super::module::Module;

/// Opens the PEFT adapter in `dir`: its weights and their layout (B in Hugging Face's row
/// order, the scale from the configuration).
pub(super) fn read(dir: &Path) -> Result<(Box<dyn TensorSource>, Layout), LoraError> {
    let config = AdapterConfig::read(dir)?;
    let mismatch = |problem: String| LoraError::Mismatch { path: dir.to_path_buf(), problem };
    let source = SafetensorsSet::open_files(&[dir.join(WEIGHTS_FILE)]).map_err(SourceError::from)?;
    let mut stored = Vec::new();
    for meta in source.tensors() {
        let Some(LoraTensorName { layer, module, factor }) = LoraTensorName::parse(&meta.name) else {
            return Err(mismatch(format!("tensor '{}' is not a LoRA factor of a decoder projection", meta.name)));
        };
        let Some(module) = Module::parse(&module) else {
            return Err(mismatch(format!("tensor '{}': module '{module}' is not supported", meta.name)));
        };
        stored.push(Stored { name: meta.name, layer, module, factor, shape: meta.shape });
    }
    let scale = config.scale() as f32;
    let layout = Layout { stored, rank: Some(config.rank), scale: Box::new(move |_| scale), permuted: false };
    Ok((Box::new(source), layout))
}
