//! Continuous batching: requests join the running batch at step boundaries, leave as soon as they finish,
//! long prompts are prefilled in chunks alongside decodes, KV blocks are shared by common prompt prefixes,
//! and sequences are preempted (and later resumed) when blocks run out. Runs on its own thread; the HTTP
//! layer talks to it through [`SchedulerHandle`].

mod request;
mod stats;

pub use request::{Event, EventSink, Finished, Request, SubmitError, TokenEvent};
pub use stats::{Histogram, Stats};
