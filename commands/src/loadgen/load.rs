//! The load generator: closed loop (N clients, each sending when its last request ends) or open loop
//! (requests due at seeded random arrival times, optionally capped in flight). Time is tokio's clock, and the
//! request sender is a trait, so tests drive it with a paused clock and a scripted sender, without sleeping.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::{sleep_until, Instant};

use super::arrivals::arrivals;
use super::client::api::Prompt;
use super::client::http::{Client, Outcome};
use super::report::RequestRecord;

/// Something that sends one request and reports what it saw.
pub trait Sender: Send + 'static {
    /// Sends `p` and waits for the whole response.
    fn send(&mut self, p: &Prompt) -> impl Future<Output = Outcome> + Send;
}

impl Sender for Client {
    fn send(&mut self, p: &Prompt) -> impl Future<Output = Outcome> + Send {
        Client::send(self, p)
    }
}

/// How load is applied at one level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Level {
    /// This many clients in a closed loop.
    Closed(usize),
    /// Open loop at `rate` requests/s with gamma(`burstiness`) gaps, at most `cap` in flight.
    Open {
        /// Mean requests per second.
        rate: f64,
        /// Gamma shape of the gaps (1 = Poisson).
        burstiness: f64,
        /// Most requests in flight (later ones wait, counted as client queue time).
        cap: Option<usize>,
    },
}

/// When a level ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many requests.
    Requests(usize),
    /// No request starts after this long (those in flight finish).
    After(Duration),
}

/// One level's raw result.
#[derive(Debug, Clone)]
pub struct LevelResult {
    /// Every request, in order of scheduling.
    pub records: Vec<RequestRecord>,
    /// From the level's start to its last response, seconds.
    pub duration_s: f64,
    /// Most requests in flight at once.
    pub peak_concurrency: usize,
}

/// The prompts, used in turn from `first` on.
#[derive(Clone)]
pub struct Prompts {
    /// The pool.
    pub pool: Arc<Vec<Prompt>>,
    /// Index of the first prompt this level uses.
    pub first: usize,
}

impl Prompts {
    fn get(&self, i: usize) -> &Prompt {
        &self.pool[(self.first + i) % self.pool.len()]
    }
}

/// Called with each finished request (progress display).
pub type OnDone = Arc<dyn Fn(&RequestRecord) + Send + Sync>;

/// Shared bookkeeping of a level.
struct Tally {
    start: Instant,
    records: Mutex<Vec<RequestRecord>>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    last_end: Mutex<Instant>,
    on_done: OnDone,
}

impl Tally {
    fn new(on_done: OnDone) -> Arc<Tally> {
        let start = Instant::now();
        Arc::new(Tally {
            start,
            records: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            last_end: Mutex::new(start),
            on_done,
        })
    }

    /// Sends request `id` (due at `due`) with `sender` and records it.
    async fn run<S: Sender>(&self, sender: &mut S, id: usize, due: Instant, p: &Prompt) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let o = sender.send(p).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let rec = record(id, self.start, due, &o, p);
        (self.on_done)(&rec);
        {
            let mut last = self.last_end.lock().expect("poisoned");
            *last = (*last).max(o.end);
        }
        self.records.lock().expect("poisoned").push(rec);
    }

    fn finish(self: Arc<Self>) -> LevelResult {
        let mut records = std::mem::take(&mut *self.records.lock().expect("poisoned"));
        records.sort_by_key(|r| r.id);
        let end = *self.last_end.lock().expect("poisoned");
        LevelResult {
            records,
            duration_s: (end - self.start).as_secs_f64(),
            peak_concurrency: self.peak.load(Ordering::SeqCst),
        }
    }
}

/// Turns what a sender saw into a request record (times relative to the level's `start`).
pub fn record(id: usize, start: Instant, due: Instant, o: &Outcome, p: &Prompt) -> RequestRecord {
    let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1000.0;
    let ok = o.error.is_none();
    RequestRecord {
        id,
        scheduled_s: due.saturating_duration_since(start).as_secs_f64(),
        queue_ms: ms(due, o.sent),
        ttft_ms: o.tokens.first().map(|&t| ms(o.sent, t)),
        itl_ms: o.tokens.windows(2).map(|w| ms(w[0], w[1])).collect(),
        e2e_ms: ok.then(|| ms(o.sent, o.end)),
        input_tokens: o.input_tokens.or(p.input_tokens),
        output_tokens: o.output_tokens.unwrap_or(o.tokens.len() as u64),
        error: o.error.as_ref().map(|e| e.0),
        error_message: o.error.as_ref().map(|e| e.1.clone()),
    }
}

/// Runs one level: `make` builds a sender per client; returns every request's record.
pub async fn run_level<S, F>(
    make: F,
    prompts: Prompts,
    level: Level,
    stop: Stop,
    seed: u64,
    on_done: OnDone,
) -> LevelResult
where
    S: Sender,
    F: Fn() -> S,
{
    let tally = Tally::new(on_done);
    match level {
        Level::Closed(clients) => closed(make, prompts, clients, stop, &tally).await,
        Level::Open { rate, burstiness, cap } => {
            let times = match stop {
                Stop::Requests(n) => arrivals(rate, burstiness, seed, Some(n), 0.0),
                Stop::After(d) => arrivals(rate, burstiness, seed, None, d.as_secs_f64()),
            };
            open(make, prompts, &times, cap, &tally).await
        }
    }
    tally.finish()
}

async fn closed<S: Sender, F: Fn() -> S>(make: F, prompts: Prompts, clients: usize, stop: Stop, tally: &Arc<Tally>) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (next, tally, prompts, mut sender) = (next.clone(), tally.clone(), prompts.clone(), make());
        tasks.spawn(async move {
            loop {
                let due = Instant::now();
                let id = next.fetch_add(1, Ordering::SeqCst);
                let more = match stop {
                    Stop::Requests(n) => id < n,
                    Stop::After(d) => due < tally.start + d,
                };
                if !more {
                    break;
                }
                tally.run(&mut sender, id, due, prompts.get(id)).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

async fn open<S: Sender, F: Fn() -> S>(
    make: F,
    prompts: Prompts,
    times: &[f64],
    cap: Option<usize>,
    tally: &Arc<Tally>,
) {
    let idle: Arc<Mutex<Vec<S>>> = Arc::new(Mutex::new(Vec::new()));
    let permits = cap.map(|c| Arc::new(Semaphore::new(c)));
    let mut tasks = tokio::task::JoinSet::new();
    for (id, &t) in times.iter().enumerate() {
        let due = tally.start + Duration::from_secs_f64(t);
        sleep_until(due).await;
        let permit = match &permits {
            Some(s) => Some(s.clone().acquire_owned().await.expect("never closed")),
            None => None,
        };
        let reuse = idle.lock().expect("poisoned").pop();
        let mut sender = reuse.unwrap_or_else(&make);
        let (idle, tally, prompts) = (idle.clone(), tally.clone(), prompts.clone());
        tasks.spawn(async move {
            tally.run(&mut sender, id, due, prompts.get(id)).await;
            idle.lock().expect("poisoned").push(sender);
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::report::ErrorKind;

    /// A sender whose "server" takes `ttft` to the first token, then `itl` per token; request ids that are
    /// multiples of 5 fail with 429.
    struct Scripted {
        ttft: Duration,
        itl: Duration,
        tokens: usize,
        connected: bool,
    }

    impl Sender for Scripted {
        async fn send(&mut self, p: &Prompt) -> Outcome {
            if !self.connected {
                tokio::time::sleep(Duration::from_millis(1)).await;
                self.connected = true;
            }
            let sent = Instant::now();
            if p.text == "fail" {
                return Outcome {
                    sent,
                    tokens: vec![],
                    end: sent,
                    output_tokens: None,
                    input_tokens: None,
                    error: Some((ErrorKind::Overloaded, "429".into())),
                    unanswered: false,
                };
            }
            let mut tokens = Vec::new();
            tokio::time::sleep(self.ttft).await;
            tokens.push(Instant::now());
            for _ in 1..self.tokens {
                tokio::time::sleep(self.itl).await;
                tokens.push(Instant::now());
            }
            Outcome {
                sent,
                end: Instant::now(),
                tokens,
                output_tokens: None,
                input_tokens: None,
                error: None,
                unanswered: false,
            }
        }
    }

    fn prompts() -> Prompts {
        let p = |t: &str| Prompt { text: t.into(), input_tokens: Some(4), max_tokens: 8 };
        Prompts { pool: Arc::new(vec![p("fail"), p("a"), p("b"), p("c"), p("d")]), first: 0 }
    }

    fn make() -> Scripted {
        Scripted { ttft: Duration::from_millis(100), itl: Duration::from_millis(10), tokens: 8, connected: false }
    }

    fn quiet() -> OnDone {
        Arc::new(|_| {})
    }

    #[tokio::test(start_paused = true)]
    async fn closed_loop_times_are_exact() {
        let r = run_level(make, prompts(), Level::Closed(4), Stop::Requests(40), 0, quiet()).await;
        assert_eq!(r.records.len(), 40);
        assert_eq!(r.peak_concurrency, 4);
        assert_eq!(r.records.iter().filter(|r| r.error == Some(ErrorKind::Overloaded)).count(), 8);
        for rec in r.records.iter().filter(|r| r.error.is_none()) {
            assert_eq!(rec.ttft_ms, Some(100.0));
            assert_eq!(rec.e2e_ms, Some(170.0));
            assert_eq!(rec.itl_ms, vec![10.0; 7]);
            assert_eq!((rec.output_tokens, rec.tpot_ms()), (8, Some(10.0)));
        }
        // Each client connects once (1 ms, counted as queue time), then reuses its connection.
        assert_eq!(r.records.iter().filter(|r| r.queue_ms > 0.0).count(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn duration_stops_new_requests() {
        let stop = Stop::After(Duration::from_millis(1000));
        let r = run_level(make, prompts(), Level::Closed(2), stop, 0, quiet()).await;
        assert!(r.records.iter().all(|rec| rec.scheduled_s < 1.0));
        assert!(r.duration_s >= 1.0 && r.duration_s < 1.2, "{}", r.duration_s);
    }

    #[tokio::test(start_paused = true)]
    async fn open_loop_keeps_arrivals_and_queues_over_the_cap() {
        let level = Level::Open { rate: 50.0, burstiness: 1.0, cap: None };
        let r = run_level(make, prompts(), level, Stop::Requests(200), 9, quiet()).await;
        let want = arrivals(50.0, 1.0, 9, Some(200), 0.0);
        for (rec, t) in r.records.iter().zip(&want) {
            assert!((rec.scheduled_s - t).abs() < 1e-6);
            // The timer's 1 ms granularity, plus 1 ms to connect a new client.
            assert!(rec.queue_ms <= 2.0 + 1e-9, "{}", rec.queue_ms);
        }
        assert!(r.peak_concurrency > 4);
        // One request in flight at a time: later arrivals wait, and the wait is queue time, not TTFT.
        let level = Level::Open { rate: 50.0, burstiness: 1.0, cap: Some(1) };
        let r = run_level(make, prompts(), level, Stop::Requests(50), 9, quiet()).await;
        assert_eq!(r.peak_concurrency, 1);
        assert!(r.records.last().unwrap().queue_ms > 1000.0);
        assert!(r.records.iter().filter(|r| r.error.is_none()).all(|r| r.ttft_ms == Some(100.0)));
    }
}
