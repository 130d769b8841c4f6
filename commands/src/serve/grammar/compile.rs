//! A request's grammar compiled for the served model: checked against the bounds on the handler's thread
//! (a walk that never recurses and stops at the first bound exceeded), then compiled on the [`CompilePool`]
//! and awaited within the time bound, so that no grammar can stall the HTTP threads or overflow a stack.

use std::sync::Arc;
use std::time::Duration;

use tgi_engines::constraint::{
    Bound, CacheStats, CheckError, Compiled, Constraint, Grammar, GrammarCell, GrammarConfig,
};

use super::pool::{CompilePool, PoolError};
use crate::serve::backend::Lexicon;
use crate::serve::error::{ApiError, ValidationError};

/// Threads compiling grammars, by default.
pub const DEFAULT_THREADS: usize = 2;
/// Grammars that may wait for a compile thread, by default.
pub const DEFAULT_QUEUE: usize = 32;
/// Seconds a grammar may wait for a compile thread, and then take to compile, by default.
pub const DEFAULT_TIMEOUT_SECS: f64 = 5.0;

/// How the server compiles grammars.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GrammarSettings {
    /// The engine's bounds, digits and cache size.
    pub config: GrammarConfig,
    /// Compile threads (at least 1).
    pub threads: usize,
    /// Grammars that may wait for a thread (at least 1).
    pub queue: usize,
    /// How long a grammar may wait for a thread, and then take to compile.
    pub timeout: Duration,
}

impl Default for GrammarSettings {
    /// The engine's defaults and the ones above.
    fn default() -> Self {
        GrammarSettings {
            config: GrammarConfig::default(),
            threads: DEFAULT_THREADS,
            queue: DEFAULT_QUEUE,
            timeout: Duration::from_secs_f64(DEFAULT_TIMEOUT_SECS),
        }
    }
}

/// The served model's grammar compiler (built on first use) and the threads it runs on.
pub struct Grammars {
    settings: GrammarSettings,
    cell: Arc<GrammarCell>,
    pool: CompilePool,
}

impl Grammars {
    /// Nothing is built or started until the first grammar.
    pub fn new(settings: GrammarSettings) -> Self {
        let stack = settings.config.limits.stack_bytes();
        let pool = CompilePool::new(settings.threads, settings.queue, stack);
        Grammars { settings, cell: Arc::new(GrammarCell::new(settings.config)), pool }
    }

    /// `grammar` compiled for `lexicon`'s vocabulary. A grammar over a bound, one that does not compile and
    /// one that compiles too slowly are 422s naming `param` and what is at fault; a full queue is 429.
    pub async fn compile(
        &self,
        lexicon: Arc<dyn Lexicon>,
        param: &'static str,
        grammar: Grammar,
    ) -> Result<(Constraint, Compiled), ApiError> {
        let bad = |message: String| ApiError::from(ValidationError::Grammar { param, message });
        let checked = self.settings.config.limits.check(grammar).map_err(|e| bad(with_flag(&e)))?;
        let cell = self.cell.clone();
        let work = move || {
            let compiler = cell.get(lexicon.tokenizer(), lexicon.vocab_size(), lexicon.eos())?;
            compiler.compile(&checked)
        };
        match self.pool.run(self.settings.timeout, work).await {
            Ok(compiled) => compiled.map_err(|e| bad(e.to_string())),
            Err(PoolError::Full | PoolError::Busy(_)) => Err(ApiError::Overloaded),
            Err(e @ PoolError::Timeout(_)) => Err(bad(format!("{e} (--grammar-compile-timeout)"))),
            Err(e @ PoolError::Panicked(_)) => Err(bad(e.to_string())),
        }
    }

    /// What the compiled-grammar cache holds, once the compiler is built.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cell.built().map(|c| c.cache_stats())
    }
}

/// A refusal, with the flag that sets the bound exceeded.
fn with_flag(e: &CheckError) -> String {
    let flag = match e {
        CheckError::Over { bound: Bound::Bytes, .. } => "--grammar-max-bytes",
        CheckError::Over { bound: Bound::Depth, .. } => "--grammar-max-depth",
        CheckError::Over { bound: Bound::Choices, .. } => "--grammar-max-choices",
        CheckError::Over { bound: Bound::Refs, .. } | CheckError::RefCycle { .. } => return e.to_string(),
    };
    format!("{e} ({flag})")
}
