//! TGI's own API: `/generate`, `/generate_stream`, `/`, `/tokenize` and `/info`.

mod generate;
mod info;
pub mod types;
mod validate;

pub use generate::{compat, generate, generate_stream};
pub use info::{info, tokenize};
