//! [`PooledBuf`]: recycled buffers for the protobuf messages that cached objects keep.
//!
//! Every watch event brings a new copy of an object (~1–2 KB for a pod) that replaces the
//! one cached before it. The new copy is made on a decode thread and the old one dropped on
//! the handler's task. With glibc's allocator that is a large allocation on one thread and
//! a free into that thread's arena from another, each taking the arena's lock and merging
//! free neighbours: in the protobuf replay benchmark, a tenth of the client's CPU. This
//! pool takes dropped buffers back and hands them to the next copy of the same size class,
//! so in a steady stream of updates the allocator is rarely asked.
//!
//! Capacities are the length rounded up to [`GRAIN`] bytes, so a buffer holds at most
//! `GRAIN - 1` bytes more than its message. Only messages up to [`MAX_POOLED_LEN`] bytes
//! are pooled. The pool keeps at most [`MAX_POOLED_BYTES`] of free buffers in all and
//! [`MAX_CLASS_BYTES`] of one size class: what it holds back from the allocator is
//! bounded, whatever the objects. Nothing waits on the pool: a thread that finds a size
//! class locked by another uses the allocator instead, as it would without the pool.
//! [`set_enabled`] turns the pool off.

use parking_lot::Mutex;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Buffer capacities are multiples of this many bytes.
pub const GRAIN: usize = 64;
/// The longest message a pooled buffer holds; longer ones get a buffer of their exact
/// length that goes back to the allocator.
pub const MAX_POOLED_LEN: usize = 16 * 1024;
/// The most free buffer bytes the pool keeps, over all size classes.
pub const MAX_POOLED_BYTES: usize = 8 << 20;
/// The most free buffer bytes the pool keeps of one size class.
pub const MAX_CLASS_BYTES: usize = 1 << 20;

const CLASSES: usize = MAX_POOLED_LEN / GRAIN;

/// Free buffers by size class.
struct Pool {
    /// Class `i` holds buffers of capacity `(i + 1) * GRAIN`, emptied.
    classes: [Mutex<Vec<Vec<u8>>>; CLASSES],
    /// The capacity of all the buffers in `classes`.
    bytes: AtomicUsize,
    /// Whether buffers are pooled at all ([`set_enabled`]).
    enabled: AtomicBool,
}

static POOL: Pool = Pool::new();

/// Turns the pool on (the default) or off for the whole process. Off, every [`PooledBuf`]
/// is allocated at its exact length and freed when dropped; buffers already pooled stay in
/// the pool, unused, until it is turned on again. An application that links an allocator
/// that handles cross-thread frees well (mimalloc, jemalloc) may prefer that. Takes effect
/// for buffers made and dropped afterwards.
pub fn set_enabled(enabled: bool) {
    POOL.enabled.store(enabled, Ordering::Relaxed);
}

/// The size class of a message of `len` bytes, if it is pooled.
fn class_of(len: usize) -> Option<usize> {
    (len > 0 && len <= MAX_POOLED_LEN).then(|| len.div_ceil(GRAIN) - 1)
}

impl Pool {
    const fn new() -> Pool {
        Pool {
            classes: [const { parking_lot::const_mutex(Vec::new()) }; CLASSES],
            bytes: AtomicUsize::new(0),
            enabled: AtomicBool::new(true),
        }
    }

    /// An empty buffer with room for `len` bytes: a pooled one if its class has one.
    fn take(&self, len: usize) -> Vec<u8> {
        let class = class_of(len).filter(|_| self.enabled.load(Ordering::Relaxed));
        let Some(class) = class else {
            return Vec::with_capacity(len);
        };
        // Never waits: while another thread holds the class, the allocator serves instead.
        let pooled = self.classes[class]
            .try_lock()
            .and_then(|mut free| free.pop());
        match pooled {
            Some(buf) => {
                self.bytes.fetch_sub(buf.capacity(), Ordering::Relaxed);
                buf
            }
            None => Vec::with_capacity((class + 1) * GRAIN),
        }
    }

    /// Keeps `buf` for a later [`Pool::take`] if the pool is on, `buf` has a class's
    /// capacity, the limits leave room and no other thread holds the class; otherwise it
    /// is freed. Whether it was kept.
    fn put(&self, mut buf: Vec<u8>) -> bool {
        let cap = buf.capacity();
        if !self.enabled.load(Ordering::Relaxed) {
            return false;
        }
        // A class is exactly one capacity: buffers sized elsewhere are not taken.
        let Some(class) = class_of(cap).filter(|&c| (c + 1) * GRAIN == cap) else {
            return false;
        };
        // Checked before the class lock and raised after it, so concurrent puts may
        // overshoot the limit by a few buffers, never by more than one each.
        if self.bytes.load(Ordering::Relaxed) + cap > MAX_POOLED_BYTES {
            return false;
        }
        let Some(mut free) = self.classes[class].try_lock() else {
            return false;
        };
        if (free.len() + 1) * cap > MAX_CLASS_BYTES {
            return false;
        }
        buf.clear();
        free.push(buf);
        self.bytes.fetch_add(cap, Ordering::Relaxed);
        true
    }
}

/// An immutable byte buffer whose memory goes back to a process-wide pool when it is
/// dropped, for the next buffer of its size class.
///
/// It holds exactly the bytes it was made from. While the pool is on, its capacity is their
/// length rounded up to [`GRAIN`] (for lengths up to [`MAX_POOLED_LEN`]); otherwise it is
/// exact. Cloning copies.
pub struct PooledBuf {
    buf: Vec<u8>,
}

impl PooledBuf {
    /// A buffer holding a copy of `bytes`, reusing a pooled buffer of their size class if
    /// there is one.
    pub fn copy_from_slice(bytes: &[u8]) -> PooledBuf {
        let mut buf = POOL.take(bytes.len());
        buf.extend_from_slice(bytes);
        PooledBuf { buf }
    }

    /// The bytes of memory this buffer holds (its capacity).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

impl Deref for PooledBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl Clone for PooledBuf {
    fn clone(&self) -> PooledBuf {
        PooledBuf::copy_from_slice(&self.buf)
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        POOL.put(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_to_the_grain() {
        assert_eq!(class_of(0), None);
        assert_eq!(class_of(1), Some(0));
        assert_eq!(class_of(GRAIN), Some(0));
        assert_eq!(class_of(GRAIN + 1), Some(1));
        assert_eq!(class_of(MAX_POOLED_LEN), Some(CLASSES - 1));
        assert_eq!(class_of(MAX_POOLED_LEN + 1), None);
    }

    #[test]
    fn a_buffer_holds_its_bytes_in_a_capacity_of_its_class() {
        for len in [1, 63, 64, 65, 2000, MAX_POOLED_LEN] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let buf = PooledBuf::copy_from_slice(&bytes);
            assert_eq!(&buf[..], &bytes[..]);
            assert_eq!(buf.capacity(), len.div_ceil(GRAIN) * GRAIN);
            assert_eq!(&buf.clone()[..], &bytes[..]);
        }
        let long = vec![7u8; MAX_POOLED_LEN + 1];
        let buf = PooledBuf::copy_from_slice(&long);
        assert_eq!(&buf[..], &long[..]);
        assert_eq!(buf.capacity(), long.len(), "not pooled: exact");
        assert!(PooledBuf::copy_from_slice(&[]).is_empty());
    }

    #[test]
    fn a_freed_buffer_serves_the_next_take_of_its_class() {
        let pool = Pool::new();
        let mut buf = pool.take(1000);
        buf.extend_from_slice(&[1; 1000]);
        let ptr = buf.as_ptr();
        assert!(pool.put(buf));
        assert_eq!(pool.bytes.load(Ordering::Relaxed), 1024);
        // Another class does not get it.
        let other = pool.take(2000);
        assert_ne!(other.as_ptr(), ptr);
        let again = pool.take(970);
        assert_eq!(again.as_ptr(), ptr, "same class: the same memory");
        assert!(again.is_empty(), "handed out empty");
        assert_eq!(pool.bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_class_locked_by_another_thread_is_passed_by_not_waited_for() {
        let pool = Pool::new();
        assert!(pool.put(Vec::with_capacity(1024)));
        let class = class_of(1000).unwrap();
        let held = pool.classes[class].lock();
        let fresh = pool.take(1000);
        assert_eq!(fresh.capacity(), 1024, "a new buffer of the class");
        assert!(!pool.put(fresh), "freed, not queued behind the lock");
        drop(held);
        assert_eq!(pool.bytes.load(Ordering::Relaxed), 1024);
        assert_eq!(
            pool.classes[class].lock().len(),
            1,
            "the pooled one is still there"
        );
    }

    #[test]
    fn a_pool_turned_off_neither_keeps_nor_hands_out_buffers() {
        let pool = Pool::new();
        assert!(pool.put(Vec::with_capacity(1024)));
        pool.enabled.store(false, Ordering::Relaxed);
        let exact = pool.take(1000);
        assert_eq!(
            exact.capacity(),
            1000,
            "allocated at its length, not from the pool"
        );
        assert!(!pool.put(Vec::with_capacity(1024)));
        assert_eq!(
            pool.bytes.load(Ordering::Relaxed),
            1024,
            "what it held stays"
        );
        pool.enabled.store(true, Ordering::Relaxed);
        assert_eq!(pool.take(1000).capacity(), 1024);
        assert_eq!(pool.bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_pool_refuses_foreign_capacities_and_keeps_within_its_limits() {
        let pool = Pool::new();
        assert!(!pool.put(Vec::with_capacity(100)), "not a class capacity");
        assert!(!pool.put(Vec::with_capacity(MAX_POOLED_LEN + GRAIN)));
        // One class holds at most MAX_CLASS_BYTES.
        let cap = MAX_POOLED_LEN;
        let fit = MAX_CLASS_BYTES / cap;
        let kept = (0..fit + 5)
            .filter(|_| pool.put(Vec::with_capacity(cap)))
            .count();
        assert_eq!(kept, fit);
        // All classes together hold at most MAX_POOLED_BYTES.
        let mut class_cap = MAX_POOLED_LEN - GRAIN;
        while pool.bytes.load(Ordering::Relaxed) + class_cap <= MAX_POOLED_BYTES {
            let before = pool.bytes.load(Ordering::Relaxed);
            let fit = MAX_CLASS_BYTES / class_cap;
            for _ in 0..fit {
                pool.put(Vec::with_capacity(class_cap));
            }
            assert!(pool.bytes.load(Ordering::Relaxed) > before);
            class_cap -= GRAIN;
        }
        let full = pool.bytes.load(Ordering::Relaxed);
        assert!(full <= MAX_POOLED_BYTES);
        assert!(!pool.put(Vec::with_capacity(class_cap)), "over the total");
        assert_eq!(pool.bytes.load(Ordering::Relaxed), full);
    }
}
