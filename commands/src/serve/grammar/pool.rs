//! Threads that compile grammars away from the HTTP threads: a few, each with a stack sized for the grammar
//! bounds (llguidance recurses on a grammar's structure), fed by a bounded queue. The async handler awaits
//! the result; a full queue, or a wait for a thread longer than the time bound, is overload (429), and a
//! compile longer than the time bound is the grammar's fault (422) while it finishes on its thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

/// Work for a compile thread.
type Job = Box<dyn FnOnce() + Send>;

/// Why a job gave no result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// The queue is full.
    #[error("the grammar compile queue is full")]
    Full,
    /// No thread took the job within the time bound.
    #[error("no grammar compile thread was free within {} s", .0.as_secs_f64())]
    Busy(Duration),
    /// The job ran longer than the time bound (it goes on, its result unused).
    #[error("compiling took longer than {} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// The job panicked (its thread goes on).
    #[error("the grammar compiler failed: {0}")]
    Panicked(String),
}

/// The threads and their queue; the threads start with the first job.
pub struct CompilePool {
    threads: usize,
    queue: usize,
    stack_bytes: usize,
    sender: OnceLock<SyncSender<Job>>,
}

impl CompilePool {
    /// `threads` threads of `stack_bytes` each, at most `queue` jobs waiting.
    pub fn new(threads: usize, queue: usize, stack_bytes: usize) -> Self {
        CompilePool { threads, queue, stack_bytes, sender: OnceLock::new() }
    }

    /// Runs `work` on a compile thread and waits for it: at most `bound` for a thread to take it, then at
    /// most `bound` for it to finish.
    pub async fn run<T: Send + 'static>(
        &self,
        bound: Duration,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PoolError> {
        let (started_tx, started) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        let job: Job = Box::new(move || {
            if done_tx.is_closed() {
                return; // its request gave up waiting
            }
            let _ = started_tx.send(());
            let result = catch_unwind(AssertUnwindSafe(work)).map_err(|p| panic_message(p.as_ref()));
            let _ = done_tx.send(result);
        });
        match self.sender().try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(PoolError::Full),
            Err(TrySendError::Disconnected(_)) => return Err(PoolError::Busy(bound)),
        }
        match tokio::time::timeout(bound, started).await {
            Ok(Ok(())) => {}
            _ => return Err(PoolError::Busy(bound)),
        }
        match tokio::time::timeout(bound, done).await {
            Ok(Ok(result)) => result.map_err(PoolError::Panicked),
            Ok(Err(_)) => Err(PoolError::Panicked("the compile thread stopped".into())),
            Err(_) => Err(PoolError::Timeout(bound)),
        }
    }

    /// The queue's sender, starting the threads on the first call.
    fn sender(&self) -> &SyncSender<Job> {
        self.sender.get_or_init(|| {
            let (tx, rx) = sync_channel::<Job>(self.queue);
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..self.threads {
                let rx = rx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("tgi-grammar-{i}"))
                    .stack_size(self.stack_bytes)
                    .spawn(move || work_through(&rx));
                if let Err(e) = spawned {
                    tracing::error!(error = %e, stack_bytes = self.stack_bytes, "could not start a grammar compile thread");
                }
            }
            tx
        })
    }
}

/// A compile thread's loop: one job at a time until the pool is dropped.
fn work_through(rx: &Mutex<Receiver<Job>>) {
    loop {
        let next = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
        match next {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// A panic's message.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_string(),
        (_, Some(s)) => s.clone(),
        _ => "a panic".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn results_come_back_and_the_stack_is_the_pools() {
        /// Recursion that needs about `depth` KiB of stack.
        fn deep(depth: usize) -> usize {
            let pad = std::hint::black_box([0u8; 1024]);
            if depth == 0 {
                pad[0] as usize
            } else {
                deep(depth - 1) + usize::from(pad[1] == 0)
            }
        }
        let pool = CompilePool::new(1, 4, 64 << 20);
        let rt = runtime();
        assert_eq!(rt.block_on(pool.run(LONG, || 6 * 7)), Ok(42));
        assert_eq!(rt.block_on(pool.run(LONG, || deep(16_000))), Ok(16_000), "16 MiB of stack");
    }

    #[test]
    fn a_full_queue_and_a_busy_pool_are_overload_and_a_slow_job_times_out() {
        let pool = Arc::new(CompilePool::new(1, 1, 1 << 20));
        let rt = runtime();
        let (release, blocked) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel();
        let blocker = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                runtime().block_on(pool.run(LONG, move || {
                    started_tx.send(()).unwrap();
                    blocked.recv().unwrap();
                }))
            })
        };
        started.recv().unwrap();
        // The one thread is busy: a job waits in the queue until its bound passes, and stays there...
        let bound = Duration::from_millis(50);
        assert_eq!(rt.block_on(pool.run(bound, || ())), Err(PoolError::Busy(bound)));
        // ...filling the queue of one.
        assert_eq!(rt.block_on(pool.run(LONG, || ())), Err(PoolError::Full));
        release.send(()).unwrap();
        assert_eq!(blocker.join().unwrap(), Ok(()));
        // The freed thread takes the abandoned job off the queue (and skips it) in its own time: until then the
        // queue is still full.
        let next = loop {
            match rt.block_on(pool.run(LONG, || 5)) {
                Err(PoolError::Full) => std::thread::yield_now(),
                other => break other,
            }
        };
        assert_eq!(next, Ok(5), "the abandoned job was skipped");
        let slow = rt.block_on(pool.run(Duration::from_millis(20), || std::thread::sleep(Duration::from_millis(300))));
        assert_eq!(slow, Err(PoolError::Timeout(Duration::from_millis(20))));
    }

    #[test]
    fn a_panic_is_an_error_and_the_thread_goes_on() {
        let pool = CompilePool::new(1, 4, 1 << 20);
        let rt = runtime();
        let failed = rt.block_on(pool.run(LONG, || -> u8 { panic!("bad grammar") }));
        assert_eq!(failed, Err(PoolError::Panicked("bad grammar".into())));
        assert_eq!(rt.block_on(pool.run(LONG, || 1)), Ok(1));
    }
}
