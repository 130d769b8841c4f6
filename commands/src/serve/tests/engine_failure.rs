//! A panic on the engine thread, injected through a request's sink on the real scheduler over the bundled
//! model: the requests it held fail with 500, the server marks itself unhealthy and stops with an error.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tgi_engines::model::{load, LoadOptions, LoadedModel};
use tgi_engines::pooling::Pooling;
use tgi_engines::scheduler::{
    Event, EventSink, Request, Scheduler, SchedulerConfig, SchedulerHandle, Stats, SubmitError,
};

use super::client::post;
use super::limits;
use crate::serve::backend::Backend;
use crate::serve::openai::reasoning::ReasoningSettings;
use crate::serve::run::serve_supervised;
use crate::serve::server::ConnectionLimits;
use crate::serve::state::{Access, AppState, ServedModel};

/// Forwards events, but panics (on the engine thread, which sends them) at the first token.
struct PanicAtFirstToken(Box<dyn EventSink>);

impl EventSink for PanicAtFirstToken {
    fn send(&mut self, event: Event) -> bool {
        if matches!(event, Event::Token(_)) {
            panic!("injected panic");
        }
        self.0.send(event)
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// The real scheduler; a prompt containing "panic" gets the panicking sink.
struct Injecting {
    scheduler: SchedulerHandle,
    model: Arc<LoadedModel>,
}

impl Backend for Injecting {
    fn submit(&self, req: Request, sink: Box<dyn EventSink>) -> Result<(), SubmitError> {
        let prompt = self.model.tokenizer.decode(&req.prompt_ids, true).unwrap_or_default();
        let sink = if prompt.contains("panic") { Box::new(PanicAtFirstToken(sink)) } else { sink };
        self.scheduler.submit(req, sink)
    }

    fn stats(&self) -> Stats {
        self.scheduler.stats()
    }
}

#[test]
fn an_engine_panic_fails_held_requests_and_stops_the_server_with_an_error() {
    let path = crate::model_args::bundled_path().unwrap();
    let model = Arc::new(load(path.to_str().unwrap(), &LoadOptions::default()).unwrap());
    let scheduler = Scheduler::start(model.clone(), SchedulerConfig::default()).unwrap();
    let watch = scheduler.watch();
    let backend = Arc::new(Injecting { scheduler, model: model.clone() });
    let served = ServedModel {
        id: "stories260k".into(),
        compute_type: "cpu".into(),
        created: 1,
        speculate: None,
        tool_call_parser: None,
        kv_budget: "--max-batch-total-tokens".into(),
        kv_dtype: model.model.kv_dtype(),
        kv_rotation: model.model.kv_rotation(),
        reasoning: ReasoningSettings::default(),
        pooling: Pooling::Mean,
        embedding_size: 3,
    };
    let state = Arc::new(AppState::new(backend, model, limits(), Access::default(), served));
    state.healthy.store(true, Ordering::Relaxed);
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        if let Err(message) = watch.wait() {
            let _ = failed_tx.send(message);
        }
    });
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server_state = state.clone();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            let never = std::future::pending::<()>();
            serve_supervised(
                listener,
                server_state,
                never,
                failed_rx,
                ConnectionLimits { max_connections: 64, grace: Duration::from_secs(5), drain: Duration::ZERO },
            )
            .await
        })
    });
    let addr = addr_rx.recv().unwrap();
    // A long request held by the engine, then the one that panics it.
    let held = std::thread::spawn(move || {
        let body = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 60}});
        post(addr, "/generate", &body)
    });
    let reply = post(addr, "/generate", &json!({"inputs": "panic", "parameters": {"max_new_tokens": 4}}));
    assert_eq!(reply.status, 424, "{}", reply.text());
    assert_eq!(reply.json()["error"], "Request failed during generation: the engine stopped: injected panic");
    let held = held.join().unwrap();
    // The long request either finished before the panic reached it or failed with it; never hangs.
    assert!(held.status == 200 || held.json()["error"].as_str().unwrap().contains("injected panic"), "{}", held.text());
    let stopped = server.join().unwrap();
    assert_eq!(stopped.unwrap_err().to_string(), "the engine stopped: injected panic");
    assert!(!state.healthy.load(Ordering::Relaxed));
}
