//! The bytes an HTTP/2 connection has yet to write, kept as segments for one vectored write.
//!
//! Why segments: one watch event goes to a hundred streams of a connection as a hundred DATA
//! frames with the same payload. Each frame here is its 9 header bytes inline plus a reference
//! to a payload held once per queue (consecutive frames with the same payload share it), so
//! appending a frame allocates nothing and touches no reference count; the payload bytes are
//! never copied before the kernel copies them.

use super::frame::HEAD_LEN;
use bytes::Bytes;
use std::collections::VecDeque;
use std::io::IoSlice;

#[derive(Debug)]
enum Segment {
    /// A frame header and `len` payload bytes from `payloads[payload][start..]`.
    Frame {
        head: [u8; HEAD_LEN],
        payload: usize,
        start: usize,
        len: usize,
    },
    /// Complete bytes (control frames, header blocks).
    Raw(Bytes),
}

impl Segment {
    fn len(&self) -> usize {
        match self {
            Segment::Frame { len, .. } => HEAD_LEN + len,
            Segment::Raw(b) => b.len(),
        }
    }
}

/// A queue of bytes to write, in order (see the module docs).
#[derive(Debug, Default)]
pub struct SendQueue {
    segs: VecDeque<Segment>,
    payloads: Vec<Bytes>,
    /// Bytes of the front segment already written.
    front_sent: usize,
    len: usize,
}

impl SendQueue {
    /// An empty queue.
    pub fn new() -> SendQueue {
        SendQueue::default()
    }

    /// True if there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes left to write.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Appends complete bytes.
    pub fn push_raw(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.len += b.len();
        self.segs.push_back(Segment::Raw(b));
    }

    /// Appends a frame: `head`, then `payload[start..start + len]` (clamped to the payload).
    pub fn push_frame(&mut self, head: [u8; HEAD_LEN], payload: &Bytes, start: usize, len: usize) {
        let start = start.min(payload.len());
        let len = len.min(payload.len() - start);
        let same = self
            .payloads
            .last()
            .is_some_and(|p| p.as_ptr() == payload.as_ptr() && p.len() == payload.len());
        if !same && len > 0 {
            self.payloads.push(payload.clone());
        }
        let idx = self.payloads.len().saturating_sub(1);
        self.len += HEAD_LEN + len;
        self.segs.push_back(Segment::Frame {
            head,
            payload: idx,
            start,
            len,
        });
    }

    /// The unwritten bytes as at most `max` slices, in order.
    pub fn io_slices(&self, max: usize) -> Vec<IoSlice<'_>> {
        let mut v = Vec::with_capacity(max.min(self.segs.len() * 2));
        let mut skip = self.front_sent;
        for seg in &self.segs {
            if v.len() + 2 > max {
                break;
            }
            match seg {
                Segment::Raw(b) => {
                    if let Some(rest) = b.get(skip..) {
                        v.push(IoSlice::new(rest));
                    }
                }
                Segment::Frame {
                    head,
                    payload,
                    start,
                    len,
                } => {
                    if let Some(h) = head.get(skip..) {
                        if !h.is_empty() {
                            v.push(IoSlice::new(h));
                        }
                    }
                    let from = start + skip.saturating_sub(HEAD_LEN);
                    if let Some(body) = self
                        .payloads
                        .get(*payload)
                        .and_then(|p| p.get(from..start + len))
                    {
                        if !body.is_empty() {
                            v.push(IoSlice::new(body));
                        }
                    }
                }
            }
            skip = 0;
        }
        v
    }

    /// Drops the first `n` bytes (just written).
    pub fn advance(&mut self, mut n: usize) {
        n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let Some(front) = self.segs.front() else {
                break;
            };
            let left = front.len() - self.front_sent;
            if n < left {
                self.front_sent += n;
                return;
            }
            n -= left;
            self.front_sent = 0;
            self.segs.pop_front();
        }
        if self.segs.is_empty() {
            self.payloads.clear();
            self.front_sent = 0;
        }
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.segs.clear();
        self.payloads.clear();
        self.front_sent = 0;
        self.len = 0;
    }

    /// All unwritten bytes, copied (for tests and diagnostics).
    pub fn to_vec(&self) -> Vec<u8> {
        self.io_slices(usize::MAX)
            .iter()
            .flat_map(|s| s.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_share_payloads_and_survive_partial_writes() {
        let mut q = SendQueue::new();
        let p = Bytes::from_static(b"payload!");
        q.push_raw(Bytes::from_static(b"CTRL"));
        for i in 0..3u8 {
            q.push_frame([i; HEAD_LEN], &p, 0, p.len());
        }
        q.push_frame([9; HEAD_LEN], &p, 4, 100);
        assert_eq!(q.payloads.len(), 1, "one payload for every frame");
        let mut want = b"CTRL".to_vec();
        for i in 0..3u8 {
            want.extend_from_slice(&[i; HEAD_LEN]);
            want.extend_from_slice(b"payload!");
        }
        want.extend_from_slice(&[9; HEAD_LEN]);
        want.extend_from_slice(b"oad!");
        assert_eq!(q.to_vec(), want);
        assert_eq!(q.len(), want.len());
        // Partial writes at every boundary kind: inside raw, inside a head, inside a payload.
        let mut got = Vec::new();
        for step in [2usize, 5, 7, 3, 11, 1] {
            let slices = q.io_slices(3);
            let flat: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            let n = step.min(flat.len());
            got.extend_from_slice(&flat[..n]);
            q.advance(n);
        }
        got.extend_from_slice(&q.to_vec());
        assert_eq!(got, want);
        q.advance(q.len());
        assert!(q.is_empty());
        assert!(q.payloads.is_empty());
    }

    proptest! {
        #[test]
        fn any_write_pattern_yields_the_bytes_in_order(
            frames in proptest::collection::vec((any::<bool>(), 0usize..40, 0usize..3), 1..30),
            writes in proptest::collection::vec(1usize..50, 1..200),
            max_slices in 2usize..8,
        ) {
            let payloads = [Bytes::from(vec![1u8; 40]), Bytes::from(vec![2u8; 17]), Bytes::new()];
            let mut q = SendQueue::new();
            let mut want = Vec::new();
            for (i, (raw, len, which)) in frames.iter().enumerate() {
                if *raw {
                    let b = Bytes::from(vec![i as u8; *len]);
                    want.extend_from_slice(&b);
                    q.push_raw(b);
                } else {
                    let p = &payloads[*which];
                    let l = (*len).min(p.len());
                    want.extend_from_slice(&[200u8; HEAD_LEN]);
                    want.extend_from_slice(&p[..l]);
                    q.push_frame([200u8; HEAD_LEN], p, 0, *len);
                }
            }
            prop_assert_eq!(q.len(), want.len());
            let mut got = Vec::new();
            for w in writes {
                if q.is_empty() { break; }
                let flat: Vec<u8> = q.io_slices(max_slices).iter().flat_map(|s| s.iter().copied()).collect();
                prop_assert!(!flat.is_empty());
                let n = w.min(flat.len());
                got.extend_from_slice(&flat[..n]);
                q.advance(n);
            }
            got.extend_from_slice(&q.to_vec());
            prop_assert_eq!(got, want);
        }
    }
}
