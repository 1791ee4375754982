//! Serving the router on a TCP listener: a bounded number of connections, a limit on the time
//! to send a request's headers (a slow client holds its connection only so long), keep-alive,
//! and a graceful stop when the stop flag is raised.
//!
//! A hand-written accept loop over hyper's connection builder: `axum::serve` has no header
//! timeout and no connection limit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 512;
/// Time a client has to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `stop` is raised; returns after open connections had
/// a moment to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    router: axum::Router,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true);
    let builder = Arc::new(builder);
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => p.context("the connection limit closed")?,
            _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
        };
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: wait, do not die.
                    eprintln!("kbench serve: accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let builder = Arc::clone(&builder);
        let mut closing = closing_rx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            // hyper's header timeout starts at a request's first byte: a connection that
            // never sends one would hold its slot for ever.
            // (`readable()` may wake spuriously: a peek waits for a byte.)
            let mut first = [0u8; 1];
            if !matches!(
                tokio::time::timeout(HEADER_TIMEOUT, stream.peek(&mut first)).await,
                Ok(Ok(1))
            ) {
                return;
            }
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    router.clone().oneshot(req.map(axum::body::Body::new))
                });
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = closing.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
    let _ = closing_tx.send(true);
    // Connections finish their answers (the watch tells each); give them a moment.
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        permits.acquire_many(MAX_CONNECTIONS as u32),
    )
    .await;
    Ok(())
}
