//! Starting the engine thread, and the handle the HTTP layer submits requests and reads stats through.

use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;

use super::config::SchedulerConfig;
use super::engine::{self, Submission};
use super::proposer::Proposer;
use super::request::{Event, EventSink, Request, SubmitError};
use super::stats::Stats;
use crate::kv::BLOCK_SIZE;
use crate::model::{LoadedModel, ModelError};

/// Starts the continuous-batching engine.
pub struct Scheduler;

impl Scheduler {
    /// Allocates the KV pool for `model` and starts the engine on its own thread ("tgi-scheduler"). The thread
    /// blocks while there is nothing to do and ends once every handle is dropped and no request is left.
    pub fn start(model: Arc<LoadedModel>, cfg: SchedulerConfig) -> Result<SchedulerHandle, ModelError> {
        cfg.validate()?;
        let blocks = cfg.num_blocks();
        let kv = model.model.new_cache(BLOCK_SIZE, blocks)?;
        let proposer = Proposer::new(cfg.speculation.as_ref(), &model, blocks)?;
        let stats = Arc::new(Mutex::new(Stats::new(&cfg)));
        let (tx, rx) = mpsc::channel();
        let c = model.model.config();
        let fate = Arc::new(Fate::default());
        let handle = SchedulerHandle {
            tx,
            stats: stats.clone(),
            capacity: blocks * BLOCK_SIZE,
            context: c.context,
            vocab: c.vocab,
            prefix_caching: cfg.batching.prefix_caching,
            fate: fate.clone(),
        };
        thread::Builder::new()
            .name("tgi-scheduler".into())
            .spawn(move || {
                // A panic while failing the requests after a first one still ends the thread with a verdict.
                let ran = panic::catch_unwind(AssertUnwindSafe(|| engine::run(&model, (kv, proposer), cfg, rx, stats)));
                fate.end(ran.unwrap_or_else(|payload| Err(engine::panic_message(payload.as_ref()))));
            })
            .map_err(|e| ModelError::Config(format!("cannot start the scheduler thread: {e}")))?;
        Ok(handle)
    }
}

/// How the engine thread ended, once it has: `Err` with the message of a panic.
#[derive(Default)]
struct Fate {
    ended: Mutex<Option<Result<(), String>>>,
    changed: Condvar,
}

impl Fate {
    fn end(&self, how: Result<(), String>) {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner) = Some(how);
        self.changed.notify_all();
    }
}

/// Waits for the engine thread to end (without keeping it alive, unlike a [`SchedulerHandle`]).
#[derive(Clone)]
pub struct EngineWatch(Arc<Fate>);

impl EngineWatch {
    /// Blocks until the engine thread ends: `Err` with the panic's message when it panicked (every request it
    /// held was failed), `Ok` when it ended because every handle was dropped.
    pub fn wait(&self) -> Result<(), String> {
        let mut ended = self.0.ended.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(how) = ended.as_ref() {
                return how.clone();
            }
            ended = self.0.changed.wait(ended).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Submits requests to a running scheduler and reads its stats; cheap to clone, shareable across threads.
#[derive(Clone)]
pub struct SchedulerHandle {
    tx: Sender<Submission>,
    stats: Arc<Mutex<Stats>>,
    /// Tokens the KV pool holds.
    capacity: usize,
    /// The model's context length.
    context: usize,
    /// The model's vocabulary size.
    vocab: usize,
    /// Whether prompts' block hashes are computed for the prefix cache.
    prefix_caching: bool,
    /// How the engine thread ended.
    fate: Arc<Fate>,
}

impl SchedulerHandle {
    /// Queues `req`; its events go to `sink`. Refused when it can never fit: prompt plus `max_new_tokens` (the
    /// latter clamped to the model's context) over the KV pool, or a prompt that leaves no
    /// room in the context for one new token (`capacity` is then the smaller of pool and context). An empty
    /// prompt or a token outside the vocabulary is accepted and answered with `Event::Failed`.
    pub fn submit(&self, req: Request, mut sink: Box<dyn EventSink>) -> Result<(), SubmitError> {
        let prompt = req.prompt_ids.len();
        let needed = (prompt + req.max_new_tokens.max(1)).min(self.context).max(prompt + 1);
        let capacity = self.capacity.min(self.context);
        if needed > capacity {
            return Err(SubmitError::TooLarge { needed, capacity });
        }
        if prompt == 0 {
            sink.send(Event::Failed("the prompt has no tokens".into()));
            return Ok(());
        }
        if let Some(&id) = req.prompt_ids.iter().find(|&&id| id as usize >= self.vocab) {
            sink.send(Event::Failed(ModelError::TokenOutOfRange { id, vocab: self.vocab }.to_string()));
            return Ok(());
        }
        self.tx.send(Submission::new(req, sink, self.prefix_caching)).map_err(|_| SubmitError::NotRunning)
    }

    /// A snapshot of the scheduler's gauges and counters.
    pub fn stats(&self) -> Stats {
        self.stats.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A watch on the engine thread, to learn when it ends (and whether it panicked).
    pub fn watch(&self) -> EngineWatch {
        EngineWatch(self.fate.clone())
    }

    /// Tokens the KV pool holds.
    pub fn capacity_tokens(&self) -> usize {
        self.capacity
    }
}
