//! A llama.cpp GGUF LoRA adapter's factors placed on the base (`convert_lora_to_gguf.py` output): the header
//! checked (an adapter, of type lora, for the base's architecture), every `blk.N.<tensor>.lora_a/.lora_b` named
//! as a layer's projection; LoRA on the embeddings or the output layer, and the norms mergekit adds, refused.

use std::path::Path;

use tgi_formats::gguf::lora::{AdapterHeader, GgufLoraName};
use tgi_formats::{GgufFile, SourceError, TensorSource};

use super::adapter::{Layout, LoraError, Stored};
use super::module::Module;
use crate::convert::names::gguf_arch;
use crate::model::DecoderConfig;

/// Opens the GGUF adapter at `path` for a base of `cfg`: the file and its layout (B's q/k rows in llama.cpp's
/// order, each pair's scale `alpha / rank`).
pub(super) fn read(path: &Path, cfg: &DecoderConfig) -> Result<(Box<dyn TensorSource>, Layout), LoraError> {
    let mismatch = |problem: String| LoraError::Mismatch { path: path.to_path_buf(), problem };
    let file = GgufFile::open(path).map_err(SourceError::from)?;
    let header = AdapterHeader::read(&file).map_err(mismatch)?;
    let arch = gguf_arch(cfg.architecture);
    if header.architecture != arch {
        return Err(mismatch(format!(
            "an adapter for a '{}' model; the base model is '{arch}' (an adapter for another base?)",
            header.architecture
        )));
    }
    let mut stored = Vec::new();
    for meta in TensorSource::tensors(&file) {
        let Some(name) = GgufLoraName::parse(&meta.name) else {
            return Err(mismatch(format!(
                "tensor '{}' is not a LoRA factor (an adapter that replaces base weights such as norms is not \
                 supported)",
                meta.name
            )));
        };
        let Some(layer) = name.layer() else {
            return Err(mismatch(format!(
                "tensor '{}': LoRA on the embeddings or the output layer is not supported, only on the decoder \
                 layers' projections",
                meta.name
            )));
        };
        let Some(module) = Module::from_gguf(&name.base, cfg, layer) else {
            return Err(mismatch(format!(
                "tensor '{}': '{}' is not a projection of this base model tgi applies LoRA to",
                meta.name, name.base
            )));
        };
        stored.push(Stored { name: meta.name, layer, module, factor: name.factor, shape: meta.shape });
    }
    let layout = Layout { stored, rank: None, scale: Box::new(move |r| header.scale(r)), permuted: true };
    Ok((Box::new(file), layout))
}
