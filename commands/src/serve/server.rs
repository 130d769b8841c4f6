//! The HTTP/1.1 server: an accept loop on tokio, one task per connection within the connection
//! bound (see [`super::connections`]), and a graceful stop that refuses new connections, cuts
//! request bodies still arriving, and lets requests in flight finish within a grace period.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use super::connections::{Slot, Slots};
use super::head::{MAX_HEADERS, MAX_HEAD_BYTES};
use super::parse_errors::JsonParseErrors;
use super::router;
use super::state::AppState;

/// How long a request's header section may take to arrive (and an idle connection may wait for
/// its next request).
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The same on a connection in the reserve, which must free its slot quickly.
const RESERVE_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How the server stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every request in flight finished.
    Drained,
    /// The grace period ran out with requests still in flight.
    GraceExpired,
}

/// What bounds the server's connections.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Most connections served as usual (`--max-connections`).
    pub max_connections: usize,
    /// How long requests in flight get to finish after the stop signal.
    pub grace: Duration,
    /// How long the server keeps accepting after the stop signal, `/health` answering 503.
    pub drain: Duration,
}

/// The HTTP/1.1 settings of a connection (keep-alive off in the reserve).
fn builder(reserve: bool) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(if reserve { RESERVE_HEADER_TIMEOUT } else { HEADER_TIMEOUT })
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .keep_alive(!reserve);
    b
}

/// Serves `listener` until `shutdown` resolves, then drains: `/health` answers 503 while the server
/// goes on serving for `limits.drain`; then it stops accepting, cuts the request bodies still
/// arriving (503) and waits up to `limits.grace` for the requests in flight to finish.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
    limits: ConnectionLimits,
) -> Stopped {
    let shutdown = async {
        shutdown.await;
        state.draining.store(true, std::sync::atomic::Ordering::Relaxed);
        if !limits.drain.is_zero() {
            tracing::info!(
                "draining: /health answers 503; new connections are refused in {} s",
                limits.drain.as_secs_f64()
            );
            tokio::time::sleep(limits.drain).await;
        }
    };
    let graceful = GracefulShutdown::new();
    let slots = Slots::new(limits.max_connections);
    let (regular, reserve) = (builder(false), builder(true));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: wait instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Some(slot) = slots.take() else {
                    tracing::debug!("connection closed unanswered: --max-connections and its reserve are in use");
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let reserved = match &slot {
                    Slot::Regular { .. } => None,
                    Slot::Reserve(r) => Some(r.reserved.clone()),
                };
                let state = state.clone();
                let in_reserve = reserved.clone();
                let service = service_fn(move |req| {
                    if let Some(r) = &in_reserve {
                        r.start();
                    }
                    router::handle(state.clone(), req, in_reserve.is_some())
                });
                let (io, linger) = JsonParseErrors::new(stream);
                let builder = if reserved.is_some() { &reserve } else { &regular };
                let conn = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
                tokio::spawn(async move {
                    match reserved {
                        None => {
                            let _ = conn.await;
                        }
                        Some(r) => {
                            tokio::select! {
                                _ = conn => {}
                                () = r.evicted() => {}
                            }
                        }
                    }
                    linger.close().await;
                    drop(slot);
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    state.stopping.begin();
    match tokio::time::timeout(limits.grace, graceful.shutdown()).await {
        Ok(()) => Stopped::Drained,
        Err(_) => Stopped::GraceExpired,
    }
}

/// Answers every request on `listener` with 503 (`loading`, `Retry-After: 1`, connection closed)
/// until `until` resolves, and returns its output: the model is loading, and a readiness probe or a
/// router's health check gets a clear "not yet" rather than a refused connection.
pub async fn serve_loading<F: Future>(listener: &TcpListener, until: F) -> F::Output {
    let b = builder(true);
    tokio::pin!(until);
    loop {
        tokio::select! {
            out = &mut until => return out,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let service = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    Ok::<_, std::convert::Infallible>(router::loading(req.uri().path()))
                });
                let conn = b.serve_connection(TokioIo::new(stream), service);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
