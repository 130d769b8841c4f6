//! LoRA adapters served beside one base model: loaded from PEFT directories or llama.cpp GGUF adapters
//! ([`LoraAdapter`]), applied per row of a batched step beside the base projections ([`LoraStep`]), so one step
//! mixes sequences of many adapters and of the base.

mod adapter;
mod gguf;
mod module;
mod peft;
mod step;

pub use adapter::{LoraAdapter, LoraError};
pub use module::{full_adapter_bytes, Module};
pub use step::{LayerLora, LoraStep, LoraUse};
