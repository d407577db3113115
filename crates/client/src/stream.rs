//! [`NextStream`]: the client's async sources as a [`futures_core::Stream`], so that they
//! compose with `futures::StreamExt` (`filter`, `map`, `take`, `select`, `buffer_unordered`,
//! ...) as Rust async code expects.
//!
//! Each source keeps its own `next` (or `get`) method, which stays the cheapest way to take
//! items one by one. The stream is an adapter over that method: it owns the source, and
//! while an item is awaited it holds the boxed future of one `next` call (one allocation per
//! item), which owns the source for that time. The sources that offer one:
//!
//! | source | how | item |
//! |---|---|---|
//! | [`WatchStream`](crate::rest::WatchStream) | `into_stream()` | `Result<WatchEvent<T>, Error>` |
//! | [`EventSource`](crate::cache::EventSource) (boxed) | `into_stream()` | `Result<WatchEvent<K>, WatchError>` |
//! | [`NotificationStream`](crate::cache::NotificationStream) | `into_stream()` | `Notification<K>` |
//! | [`Queue`](crate::workqueue::Queue), [`DelayingQueue`](crate::workqueue::DelayingQueue), [`RateLimitingQueue`](crate::workqueue::RateLimitingQueue) | [`WorkQueue::stream`](crate::workqueue::WorkQueue::stream) | the queued item |
//!
//! A stream ends (yields `None`) where its source's `next` returns `None`; polling it again
//! asks the source again, which for all of the above answers `None` again.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

/// The future of one step: the source back, with what its `next` returned.
type Step<S, T> = Pin<Box<dyn Future<Output = (S, Option<T>)> + Send>>;

/// Where a [`NextStream`] is.
enum State<S, T> {
    /// No item is awaited; the source is here.
    Idle(S),
    /// An item is awaited; the source is inside the step's future.
    Waiting(Step<S, T>),
    /// Only while a poll runs (or after the source's `next` panicked).
    Empty,
}

/// A [`Stream`] over a source with an async `next`-like method: each item is what one call
/// of that method returned, in order, and the stream ends where the method returns `None`.
///
/// Made by the sources themselves (see the [module docs](self)). `Send` when the source and
/// its items are; `Unpin` always (the source is moved, never pinned in place). Dropping the
/// stream drops the source, as dropping the source would (a [`NotificationStream`]
/// unregisters, a [`WatchStream`] closes its connection; a queue handle is only a clone).
///
/// [`NotificationStream`]: crate::cache::NotificationStream
/// [`WatchStream`]: crate::rest::WatchStream
#[must_use = "streams do nothing unless polled"]
pub struct NextStream<S, T> {
    state: State<S, T>,
    step: fn(S) -> Step<S, T>,
}

impl<S, T> NextStream<S, T> {
    /// A stream that takes each item by calling `step` with the source, which hands the
    /// source back with the item (`None` at the end).
    pub(crate) fn new(source: S, step: fn(S) -> Step<S, T>) -> NextStream<S, T> {
        NextStream {
            state: State::Idle(source),
            step,
        }
    }

    /// The source back, if no item is being awaited: `None` while a poll left an item
    /// pending (the source is inside that unfinished call, and dropping it drops the source).
    pub fn into_inner(self) -> Option<S> {
        match self.state {
            State::Idle(source) => Some(source),
            State::Waiting(_) | State::Empty => None,
        }
    }

    /// The source, if no item is being awaited (as [`into_inner`](Self::into_inner)).
    pub fn get_ref(&self) -> Option<&S> {
        match &self.state {
            State::Idle(source) => Some(source),
            State::Waiting(_) | State::Empty => None,
        }
    }
}

// Sound: the source is only ever moved (into a boxed future and back), never pinned.
impl<S, T> Unpin for NextStream<S, T> {}

impl<S, T> Stream for NextStream<S, T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = self.get_mut();
        loop {
            match std::mem::replace(&mut this.state, State::Empty) {
                State::Idle(source) => this.state = State::Waiting((this.step)(source)),
                State::Waiting(mut step) => {
                    return match step.as_mut().poll(cx) {
                        Poll::Ready((source, item)) => {
                            this.state = State::Idle(source);
                            Poll::Ready(item)
                        }
                        Poll::Pending => {
                            this.state = State::Waiting(step);
                            Poll::Pending
                        }
                    };
                }
                State::Empty => return Poll::Ready(None),
            }
        }
    }
}

impl<S, T> fmt::Debug for NextStream<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Idle(_) => "idle",
            State::Waiting(_) => "waiting",
            State::Empty => "empty",
        };
        f.debug_struct("NextStream")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt as _;

    /// Counts down to zero, then ends.
    struct Countdown(u32);

    impl Countdown {
        async fn next(&mut self) -> Option<u32> {
            tokio::task::yield_now().await;
            let n = self.0.checked_sub(1)?;
            self.0 = n;
            Some(n)
        }

        fn stream(self) -> NextStream<Countdown, u32> {
            NextStream::new(self, |mut c| {
                Box::pin(async move {
                    let item = c.next().await;
                    (c, item)
                })
            })
        }
    }

    #[tokio::test]
    async fn items_come_in_order_and_the_end_is_kept() {
        let mut s = Countdown(4).stream();
        assert_eq!(s.get_ref().map(|c| c.0), Some(4));
        let evens: Vec<u32> = s
            .by_ref()
            .filter(|n| std::future::ready(n % 2 == 0))
            .collect()
            .await;
        assert_eq!(evens, [2, 0]);
        assert_eq!(
            s.next().await,
            None,
            "asked again, the source still says None"
        );
        assert_eq!(s.into_inner().map(|c| c.0), Some(0));
    }

    #[tokio::test]
    async fn a_pending_item_holds_the_source() {
        let mut s = Countdown(3).stream();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // The first poll starts the call, which yields once.
        assert!(Pin::new(&mut s).poll_next(&mut cx).is_pending());
        assert!(s.get_ref().is_none());
        assert_eq!(format!("{s:?}"), "NextStream { state: \"waiting\", .. }");
        assert_eq!(s.next().await, Some(2));
        assert_eq!(s.take(5).collect::<Vec<_>>().await, [1, 0]);
    }
}
