//! LoRA adapters served beside one base model: loaded from PEFT directories ([`LoraAdapter`]), applied per row
//! of a batched step beside the base projections ([`LoraStep`]), so one step mixes sequences of many adapters
//! and of the base.

mod adapter;
mod step;

pub use adapter::{LoraAdapter, LoraError, Module};
pub use step::{LayerLora, LoraStep, LoraUse};
