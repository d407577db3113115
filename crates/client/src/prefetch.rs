//! Software prefetch for reading what another thread wrote.
//!
//! Why: a watch's bytes are copied out of the socket on one thread and decoded on another
//! (see `rest/decode_pool.rs`), so the decode thread's first touch of every cache line of a
//! frame waits for it to come from the other core or from memory. Asking for the next frame's
//! lines while the current one is decoded overlaps those waits with useful work. The
//! reflector does the same for the decoded objects it queues.
//!
//! The server has the same helper (`apiserver::cacher::prefetch`): the two crates share only
//! the wire model (`api`), which is no place for it.

/// Asks the CPU to bring the cache lines holding `bytes` (at most `max_lines` of them, from
/// the start) into the cache. A hint only: nothing is read, and on other architectures it
/// does nothing.
#[inline]
pub(crate) fn prefetch_bytes(bytes: &[u8], max_lines: usize) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..bytes.len().min(max_lines * 64)).step_by(64) {
        // SAFETY: PREFETCHT0 never faults and loads nothing into a register, whatever the
        // address; this one lies inside `bytes` anyway.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                bytes.as_ptr().wrapping_add(offset).cast::<i8>(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, max_lines);
}

/// Asks the CPU to bring the cache lines holding `value` itself (not what it points to, and
/// at most `max_lines` of them, from the start) into the cache; a hint only, as
/// [`prefetch_bytes`].
#[inline]
pub(crate) fn prefetch_value<T>(value: &T, max_lines: usize) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..std::mem::size_of::<T>().min(max_lines * 64)).step_by(64) {
        // SAFETY: as in `prefetch_bytes`; the address lies inside `value`.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                (value as *const T).cast::<i8>().wrapping_add(offset),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (value, max_lines);
}
