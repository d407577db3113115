//! How etcd client errors are classified, and the bounded retry around each request.
//!
//! The one rule that matters: a write is retried only when the error proves it never reached
//! an etcd leader (the connection could not be opened, there was no leader, the server shed
//! load before accepting it). A write that timed out or lost its connection mid-flight may
//! have been applied, so it is reported as [`StorageError::Unavailable`] and the caller (the
//! API server → its client) decides; retrying it blindly could apply it twice. Reads are
//! idempotent and are retried on any transient error.

use std::future::Future;
use std::time::{Duration, Instant};
use storage::StorageError;

/// gRPC status codes (from the gRPC specification) that etcd uses for transient failures.
const CODE_CANCELLED: i32 = 1;
const CODE_DEADLINE_EXCEEDED: i32 = 4;
const CODE_RESOURCE_EXHAUSTED: i32 = 8;
const CODE_UNAVAILABLE: i32 = 14;

/// First pause between two attempts; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What an etcd error means for the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// etcd: "required revision has been compacted".
    Compacted,
    /// etcd: "required revision is a future revision".
    Future,
    /// Transient, and the request certainly was not applied (safe to retry even a write).
    NotSent(String),
    /// Transient, but the request may have been applied (retry only reads).
    MaybeApplied(String),
    /// Anything else (bad request, internal server error): not retried.
    Fatal(String),
}

impl Failure {
    /// The storage error for a failure that is returned as it is.
    pub(crate) fn into_storage(self, what: &str) -> StorageError {
        match self {
            Failure::Compacted => StorageError::Internal(format!("{what}: unexpected compaction")),
            Failure::Future => {
                StorageError::Internal(format!("{what}: unexpected future revision"))
            }
            Failure::NotSent(m) => StorageError::Unavailable(format!("etcd {what}: {m}")),
            Failure::MaybeApplied(m) => StorageError::Unavailable(format!("etcd {what}: {m}")),
            Failure::Fatal(m) => StorageError::Internal(format!("etcd {what}: {m}")),
        }
    }
}

/// Classifies an error from the etcd client.
pub(crate) fn classify(err: &etcd_client::Error) -> Failure {
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            classify_status(i32::from(status.code()), status.message())
        }
        // Building or opening a connection failed: nothing was sent.
        etcd_client::Error::TransportError(e) => Failure::NotSent(format!("transport: {e}")),
        etcd_client::Error::IoError(e) => Failure::MaybeApplied(format!("i/o: {e}")),
        other => Failure::Fatal(other.to_string()),
    }
}

/// Classifies a gRPC status by its code and etcd's message.
pub(crate) fn classify_status(code: i32, message: &str) -> Failure {
    let msg = message.to_ascii_lowercase();
    if msg.contains("required revision has been compacted") {
        return Failure::Compacted;
    }
    if msg.contains("required revision is a future revision") {
        return Failure::Future;
    }
    // Messages that prove the request was turned away before it was proposed to raft, or
    // before a connection existed at all.
    const NOT_SENT: [&str; 9] = [
        "no leader",
        "not capable",
        "too many requests",
        "connection refused",
        "tcp connect error",
        "error trying to connect",
        "dns error",
        "failed to connect",
        "connect timed out",
    ];
    let proven_not_sent = NOT_SENT.iter().any(|m| msg.contains(m));
    match code {
        CODE_RESOURCE_EXHAUSTED => Failure::NotSent(message.to_string()),
        CODE_UNAVAILABLE if proven_not_sent => Failure::NotSent(message.to_string()),
        CODE_UNAVAILABLE | CODE_DEADLINE_EXCEEDED | CODE_CANCELLED => {
            Failure::MaybeApplied(message.to_string())
        }
        _ if proven_not_sent => Failure::NotSent(message.to_string()),
        // etcd's own timeouts and leader changes come back as Unknown with these messages,
        // and so does a connection that broke mid-request (the member died): the request may
        // have been applied.
        _ if msg.contains("request timed out")
            || msg.contains("leader changed")
            || msg.contains("request cancelled")
            || msg.contains("timed out")
            || msg.contains("transport error")
            || msg.contains("h2 protocol error")
            || msg.contains("connection reset")
            || msg.contains("broken pipe") =>
        {
            Failure::MaybeApplied(message.to_string())
        }
        _ => Failure::Fatal(message.to_string()),
    }
}

/// Anything [`with_retry`] can classify: the etcd client's errors (and, in tests, a
/// [`Failure`] itself).
pub(crate) trait Classify {
    /// What this error means for the caller.
    fn classify(&self) -> Failure;
}

impl Classify for etcd_client::Error {
    fn classify(&self) -> Failure {
        classify(self)
    }
}

impl Classify for Failure {
    fn classify(&self) -> Failure {
        self.clone()
    }
}

/// Whether a request may be repeated after a failure that might have applied it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Idempotency {
    /// A read: retry on every transient failure.
    Read,
    /// A write: retry only on [`Failure::NotSent`].
    Write,
}

/// Runs `attempt` until it succeeds, fails for good, or `budget` is spent. Each attempt gets
/// the remaining budget as its timeout; a timed-out attempt counts as
/// [`Failure::MaybeApplied`]. Returns the last failure.
pub(crate) async fn with_retry<T, E, F, Fut>(
    budget: Duration,
    kind: Idempotency,
    what: &str,
    mut attempt: F,
) -> Result<T, Failure>
where
    F: FnMut() -> Fut,
    E: Classify,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + budget;
    let mut backoff = FIRST_BACKOFF;
    let mut tries = 0u32;
    loop {
        tries += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let failure = match tokio::time::timeout(left, attempt()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e.classify(),
            Err(_) => Failure::MaybeApplied(format!(
                "no answer within {budget:?} (the request may or may not have been applied)"
            )),
        };
        let retry = matches!(
            (&failure, kind),
            (Failure::NotSent(_), _) | (Failure::MaybeApplied(_), Idempotency::Read)
        );
        let left = deadline.saturating_duration_since(Instant::now());
        if !retry || left <= backoff {
            if retry || matches!(failure, Failure::MaybeApplied(_)) {
                tracing::warn!(what, tries, ?failure, "etcd request failed");
            }
            return Err(failure);
        }
        tracing::debug!(what, tries, ?failure, "etcd request failed; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn classifies_etcd_messages() {
        assert_eq!(
            classify_status(11, "etcdserver: mvcc: required revision has been compacted"),
            Failure::Compacted
        );
        assert_eq!(
            classify_status(
                11,
                "etcdserver: mvcc: required revision is a future revision"
            ),
            Failure::Future
        );
        assert!(matches!(
            classify_status(14, "etcdserver: no leader"),
            Failure::NotSent(_)
        ));
        assert!(matches!(
            classify_status(
                14,
                "error trying to connect: tcp connect error: Connection refused"
            ),
            Failure::NotSent(_)
        ));
        assert!(matches!(
            classify_status(8, "etcdserver: too many requests"),
            Failure::NotSent(_)
        ));
        assert!(matches!(
            classify_status(14, "transport is closing"),
            Failure::MaybeApplied(_)
        ));
        assert!(matches!(
            classify_status(4, "context deadline exceeded"),
            Failure::MaybeApplied(_)
        ));
        assert!(matches!(
            classify_status(2, "etcdserver: request timed out"),
            Failure::MaybeApplied(_)
        ));
        assert!(
            matches!(
                classify_status(2, "transport error"),
                Failure::MaybeApplied(_)
            ),
            "a connection that broke mid-request (member killed) is transient, not fatal"
        );
        assert!(matches!(
            classify_status(2, "h2 protocol error: error reading a body from connection"),
            Failure::MaybeApplied(_)
        ));
        assert!(matches!(
            classify_status(3, "etcdserver: key is not provided"),
            Failure::Fatal(_)
        ));
    }

    fn unavailable(msg: &str) -> Failure {
        classify_status(CODE_UNAVAILABLE, msg)
    }

    #[tokio::test]
    async fn writes_retry_only_when_not_sent() {
        let calls = AtomicU32::new(0);
        let r: Result<u32, Failure> =
            with_retry(Duration::from_secs(5), Idempotency::Write, "put", || {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < 2 {
                        Err(unavailable("tcp connect error: Connection refused"))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(r, Ok(2), "not-sent failures are retried");

        let calls = AtomicU32::new(0);
        let r: Result<u32, Failure> =
            with_retry(Duration::from_secs(5), Idempotency::Write, "put", || {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err(unavailable("transport is closing")) }
            })
            .await;
        assert!(matches!(r, Err(Failure::MaybeApplied(_))));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a maybe-applied write is not retried"
        );

        let calls = AtomicU32::new(0);
        let r: Result<u32, Failure> =
            with_retry(Duration::from_secs(5), Idempotency::Read, "get", || {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n == 0 {
                        Err(unavailable("transport is closing"))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(r, Ok(1), "reads are retried on any transient failure");
    }

    #[tokio::test]
    async fn a_hanging_attempt_times_out_within_the_budget() {
        let r: Result<(), Failure> = with_retry(
            Duration::from_millis(300),
            Idempotency::Write,
            "put",
            std::future::pending::<Result<(), Failure>>,
        )
        .await;
        assert!(matches!(r, Err(Failure::MaybeApplied(_))));
    }
}
