//! Continuous batching: requests join the running batch at step boundaries, leave as soon as they finish,
//! prompts are prefilled beside decodes (short ones whole, long ones in chunks sized by a step-cost model fitted
//! per batch size, so that running streams keep flowing; see `docs/scheduler.md`), KV blocks are shared by
//! common prompt prefixes, and sequences are preempted (and later resumed) when blocks run out. Runs on its own
//! thread; the HTTP layer talks to it through [`SchedulerHandle`].

mod config;
mod cost;
mod engine;
mod handle;
mod plan;
mod prefix;
mod prompt_logprobs;
mod proposer;
mod request;
mod sequence;
mod speculation;
mod stats;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_grammar;
#[cfg(test)]
mod tests_policy;
#[cfg(test)]
mod tests_pooled;
#[cfg(test)]
mod tests_proposers;
#[cfg(test)]
mod tests_speculation;

pub use config::{Batching, BatchingError, SchedulerConfig};
pub use handle::{EngineWatch, Scheduler, SchedulerHandle};
pub use request::{Event, EventSink, Finished, PromptLogprob, Request, SubmitError, TokenEvent};
pub use stats::{Histogram, Stats};
