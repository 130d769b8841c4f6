//! The tgi engine: model conversion plans today; models, KV cache, scheduler and sampling
//! build on the same crate.

pub mod convert;
pub mod sampling;
