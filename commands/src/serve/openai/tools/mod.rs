//! Tool calling in chat completions: the request's tools validated ([`spec`]), shown to the model by
//! its chat template or the default prompt ([`prompt`]), constrained by a grammar ([`grammar`]: forced
//! calls, or `auto` calls once their marker appears; control-token markers by id, [`markers`]), and read
//! back out of the answer in the model family's format ([`format`], [`parse`]), whole or streamed ([`reply`]).

pub mod format;
pub mod grammar;
mod markers;
mod parse;
pub mod prompt;
pub mod reply;
mod scan;
pub mod spec;

pub use format::ToolCallFormat;
pub use markers::Markers;
pub use parse::Reading;
pub use reply::{Reply, StreamedCalls};
pub use spec::{ToolError, ToolFields};
