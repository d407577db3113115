//! Software prefetch for the watch fan-out and for replays.
//!
//! Why, for the fan-out: one event visits every watcher of its bucket, and between two events the event bytes
//! going through the caches (tens of MB at 10,000 watchers) evict every watcher's state. Each
//! watcher then costs a chain of cache misses (the watcher, its queue, its HTTP/2 stream
//! window), and the locked instructions of the delivery serialise them: no two watchers' misses
//! overlap. Prefetch instructions are not ordered by those locks, so asking for the state of
//! watchers a few positions ahead lets the memory system fetch it while the current one is
//! delivered.
//!
//! For a replay: its events, their objects and bodies lie across up to hundreds of MB, so
//! each is a miss from memory; asking for them a few events ahead overlaps those misses
//! (see `Cacher::watch` and `WatchBody`'s initial frames).

/// Asks the CPU to bring the cache line holding `p` into the cache. A hint only: nothing is
/// read, any address (dangling, null) is allowed, and on other architectures it does nothing.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults and loads nothing into a register, whatever the address,
    // so the pointer needs no validity at all. Measured: see BENCHMARKS.md, "prefetching the
    // fan-out" (HTTP/2 10,000 watchers).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches the cache lines of `bytes`, at most `max_lines` of them from its start (a hint,
/// as [`prefetch`]).
#[inline]
pub fn prefetch_bytes(bytes: &[u8], max_lines: usize) {
    for offset in (0..bytes.len().min(max_lines * 64)).step_by(64) {
        prefetch(bytes.as_ptr().wrapping_add(offset));
    }
}
