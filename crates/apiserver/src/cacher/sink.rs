//! The cacher's side of a transport: what the dispatcher may ask of the connection a watch
//! goes out on, without knowing which transport that is.
//!
//! A [`WatchSink`] takes wire bytes now or says it cannot ("offer"), and waits for room on
//! behalf of the response's task; a [`WireFormat`] lays a frame out as that transport wants
//! it; a [`WatchConnection`] reports progress and can be reset; the batch hook
//! ([`set_batch_hook`]) lets a transport hold back its wake-ups until a fan-out ends. The
//! server implements them (HTTP/1.1 chunks, WebSocket messages, HTTP/2 DATA frames); the
//! cacher assumes only what the traits state.

use super::watch_frame::WatchFrame;
use bytes::Bytes;
use std::collections::VecDeque;
use std::io;
use std::sync::OnceLock;
use std::task::{Context, Poll};

/// The client of a sink is gone: nothing more can be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkClosed;

/// A transport's connection (or stream) that the dispatcher writes a watch's wire bytes to
/// directly, once the response's headers and initial frames are out.
pub trait WatchSink: Send + Sync + std::fmt::Debug {
    /// The addresses of the state [`WatchSink::offer`] touches first (0: none), for
    /// prefetching: hints, only ever prefetched, never read through. The sink itself is
    /// usually the first.
    fn hot_addresses(&self) -> [usize; 2];

    /// Takes as much of `bytes` as the transport takes now, without waiting; what was taken is
    /// cut from the front of `bytes`. `Ok(true)` when all of it was taken.
    fn offer(&self, bytes: &mut Bytes) -> Result<bool, SinkClosed>;

    /// Like [`WatchSink::offer`] for several chunks in order, removing what was taken (a
    /// socket may take them in one vectored write); stops quietly when the transport is full.
    fn offer_all(&self, chunks: &mut VecDeque<Bytes>) -> Result<(), SinkClosed> {
        while let Some(front) = chunks.front_mut() {
            if !self.offer(front)? {
                return Ok(());
            }
            chunks.pop_front();
        }
        Ok(())
    }

    /// For the response's task: sends `bytes`, registering `cx` for a wake-up while the
    /// transport has no room. `Ready(Ok)` once all of it was taken.
    fn poll_send(&self, bytes: &mut Bytes, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// The connection a watch response goes out on, as far as the dispatcher cares: whether its
/// client takes bytes, and how to give up on it.
pub trait WatchConnection: Send + Sync + std::fmt::Debug {
    /// How many writes of the connection have taken bytes so far (it only grows).
    fn writes(&self) -> u64;

    /// Resets the connection: its response and any other on it end at once.
    fn abort(&self);
}

/// How a transport lays a watch frame out on its wire (one HTTP/1.1 chunk, one WebSocket
/// message, the payload of HTTP/2 DATA frames). Implementations are statics, so a
/// [`Framing`] can name one by address.
pub trait WireFormat: Send + Sync + std::fmt::Debug {
    /// The wire bytes of `frame`, an event about an object of `kind` in `api_version`.
    fn wire(&self, frame: &WatchFrame, api_version: &str, kind: &str) -> Bytes;
}

/// A [`WireFormat`], compared and hashed by address: the key under which one event's wire
/// bytes are shared by every watcher of the same transport (see
/// [`super::cache_watcher::WireCache`]).
#[derive(Debug, Clone, Copy)]
pub struct Framing(pub &'static dyn WireFormat);

impl Framing {
    /// The wire bytes of `frame` in this framing.
    pub fn wire(self, frame: &WatchFrame, api_version: &str, kind: &str) -> Bytes {
        self.0.wire(frame, api_version, kind)
    }

    fn address(self) -> usize {
        (self.0 as *const dyn WireFormat).cast::<()>() as usize
    }
}

impl PartialEq for Framing {
    fn eq(&self, other: &Framing) -> bool {
        self.address() == other.address()
    }
}

impl Eq for Framing {}

impl std::hash::Hash for Framing {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.address().hash(state);
    }
}

/// No framing yet (a queue that is not in direct mode): frames have no wire bytes. Not
/// zero-sized, so that its static has an address of its own.
#[derive(Debug)]
#[allow(dead_code)] // only shown by Debug
struct Unframed(u8);

impl WireFormat for Unframed {
    fn wire(&self, _frame: &WatchFrame, _api_version: &str, _kind: &str) -> Bytes {
        Bytes::new()
    }
}

static UNFRAMED: Unframed = Unframed(0);

impl Default for Framing {
    fn default() -> Framing {
        Framing(&UNFRAMED)
    }
}

/// Runs a fan-out (the closure it is given) so that a transport can hold back the wake-ups
/// of its connection tasks until the fan-out ends (see [`set_batch_hook`]).
pub type BatchHook = fn(&mut dyn FnMut());

static BATCH_HOOK: OnceLock<BatchHook> = OnceLock::new();

/// Installs the transport's batch hook (the first one given counts); a transport whose
/// connections are woken by the dispatcher's writes installs it before it serves any.
pub fn set_batch_hook(hook: BatchHook) {
    let _ = BATCH_HOOK.set(hook);
}

/// Runs `f` inside the batch hook, if one is installed.
pub fn batch<R: Default>(f: impl FnOnce() -> R) -> R {
    let Some(hook) = BATCH_HOOK.get() else {
        return f();
    };
    let mut f = Some(f);
    let mut out = R::default();
    hook(&mut || {
        if let Some(g) = f.take() {
            out = g();
        }
    });
    // A hook that did not run the fan-out: run it here.
    if let Some(g) = f {
        out = g();
    }
    out
}
