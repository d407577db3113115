//! CPU work on request bodies too large for a runtime thread.
//!
//! Decoding a body of a few megabytes into a tree of values (and freeing that tree when the
//! body is refused) takes milliseconds, more for a body that is nothing but tiny nested
//! collections; done on a runtime thread, it holds up every other connection that thread
//! serves. Bodies past a small size are therefore worked on on tokio's blocking pool.

use bytes::Bytes;

/// Bodies up to this size are worked on on the calling task.
pub const INLINE_LIMIT: usize = 64 * 1024;

/// Runs `f` on `body`: on the calling task if the body is at most [`INLINE_LIMIT`] bytes,
/// else on tokio's blocking pool. `lost` makes the error returned if that task is lost
/// (it panicked, or the runtime is shutting down).
pub async fn run<T: Send + 'static, E: Send + 'static>(
    body: Bytes,
    f: impl FnOnce(&[u8]) -> Result<T, E> + Send + 'static,
    lost: impl FnOnce(String) -> E,
) -> Result<T, E> {
    if body.len() <= INLINE_LIMIT {
        return f(&body);
    }
    tokio::task::spawn_blocking(move || f(&body))
        .await
        .unwrap_or_else(|e| Err(lost(e.to_string())))
}
