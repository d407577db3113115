//! Response bodies: small complete bodies, lists streamed from shared item bytes, and a
//! wrapper that runs a callback when a long response ends.

use crate::cacher::CachedObject;
use bytes::{BufMut, Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The body type of every response.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A complete body.
pub fn full(b: Bytes) -> Body {
    Full::new(b).boxed_unsync()
}

/// A list body: `header`, the items' JSON separated by commas, `footer`. The items' bytes are
/// the cache's shared bytes; they are copied once into ~256 KiB chunks on the way out, so
/// the list is never materialized as one buffer. The exact length is known up front.
pub fn list_body(header: Bytes, items: Vec<Arc<CachedObject>>, footer: Bytes) -> Body {
    let len = header.len()
        + footer.len()
        + items.iter().map(|o| o.json.len()).sum::<usize>()
        + items.len().saturating_sub(1);
    list_body_of(header, items, footer, Some(len as u64), None, true)
}

/// Writes one list item in some rendering (a Table row, a PartialObjectMetadata).
pub type ItemEncoder = Box<dyn Fn(&CachedObject, &mut BytesMut) + Send>;

/// Like [`list_body`], but each item is written by `encode` (as it is streamed out); the
/// length is not known in advance.
pub fn list_body_with(
    header: Bytes,
    items: Vec<Arc<CachedObject>>,
    footer: Bytes,
    encode: ItemEncoder,
) -> Body {
    list_body_of(header, items, footer, None, Some(encode), true)
}

/// A list body in a binary encoding: `header`, each item as `encode` writes it (nothing
/// between them), `footer`, copied into ~256 KiB chunks as it is streamed out. `len` is the
/// body's exact length, which the caller computed from the same items: the response promises
/// it before the items are written.
pub fn list_body_exact(
    header: Bytes,
    items: Vec<Arc<CachedObject>>,
    footer: Bytes,
    encode: ItemEncoder,
    len: u64,
) -> Body {
    list_body_of(header, items, footer, Some(len), Some(encode), false)
}

fn list_body_of(
    header: Bytes,
    items: Vec<Arc<CachedObject>>,
    footer: Bytes,
    remaining: Option<u64>,
    encode: Option<ItemEncoder>,
    commas: bool,
) -> Body {
    ListBody {
        header: Some(header),
        items,
        pos: 0,
        footer: Some(footer),
        remaining,
        encode,
        commas,
    }
    .boxed_unsync()
}

struct ListBody {
    header: Option<Bytes>,
    items: Vec<Arc<CachedObject>>,
    pos: usize,
    footer: Option<Bytes>,
    remaining: Option<u64>,
    encode: Option<ItemEncoder>,
    /// JSON: a comma between items.
    commas: bool,
}

const LIST_CHUNK: usize = 256 * 1024;

impl http_body::Body for ListBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let mut buf = BytesMut::with_capacity(LIST_CHUNK + 4096);
        if let Some(h) = this.header.take() {
            buf.put_slice(&h);
        }
        while this.pos < this.items.len() && buf.len() < LIST_CHUNK {
            if this.pos > 0 && this.commas {
                buf.put_u8(b',');
            }
            match &this.encode {
                Some(e) => e(&this.items[this.pos], &mut buf),
                None => buf.put_slice(&this.items[this.pos].json),
            }
            // Release our reference as we go so memory can drop during long lists.
            this.pos += 1;
        }
        if this.pos == this.items.len() {
            if let Some(f) = this.footer.take() {
                buf.put_slice(&f);
            }
            this.items = Vec::new();
        }
        if buf.is_empty() {
            return Poll::Ready(None);
        }
        if let Some(r) = this.remaining.as_mut() {
            *r = r.saturating_sub(buf.len() as u64);
        }
        Poll::Ready(Some(Ok(Frame::data(buf.freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        self.header.is_none() && self.footer.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// Wraps a body and runs `on_end` when it is dropped (response finished or client gone).
pub fn on_drop(inner: Body, on_end: impl FnOnce() + Send + 'static) -> Body {
    OnDrop {
        inner,
        on_end: Some(Box::new(on_end)),
    }
    .boxed_unsync()
}

struct OnDrop {
    inner: Body,
    on_end: Option<Box<dyn FnOnce() + Send>>,
}

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(f) = self.on_end.take() {
            f();
        }
    }
}

impl http_body::Body for OnDrop {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
