//! The HTTP/1.1 server: an accept loop on tokio, one task per connection, and a graceful stop that
//! refuses new connections and lets requests in flight finish within a grace period.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use super::router;
use super::state::AppState;

/// How the server stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every request in flight finished.
    Drained,
    /// The grace period ran out with requests still in flight.
    GraceExpired,
}

/// Serves `listener` until `shutdown` resolves, then stops accepting and waits up to `grace` for
/// the connections in flight to finish their requests.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> Stopped {
    let graceful = GracefulShutdown::new();
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
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                let service = service_fn(move |req| router::handle(state.clone(), req));
                let conn = http1::Builder::new().timer(TokioTimer::new()).serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    match tokio::time::timeout(grace, graceful.shutdown()).await {
        Ok(()) => Stopped::Drained,
        Err(_) => Stopped::GraceExpired,
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
