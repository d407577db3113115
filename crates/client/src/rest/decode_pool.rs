//! A small process-wide set of threads that decode long runs of watch events, so a watch
//! that receives faster than one thread decodes (a replay after a reconnect, a burst of
//! writes) spreads the decoding over the machine's cores while its task goes on receiving.
//!
//! Why not `tokio::task::spawn_blocking`: its pool grows a thread per concurrent job (dozens
//! under a burst), and each job then lands on a cold thread and allocates in another
//! allocator arena. A fixed set of one thread per core (at most [`MAX_THREADS`]) measured
//! 349–365k events/s against spawn_blocking's 311k in `bench informer-events` (BENCHMARKS.md).
//!
//! Jobs run in submission order across the threads; each sends its result back through a
//! `tokio::sync::oneshot` channel, which is what a waiting stream awaits.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock};

/// The most decode threads, whatever the machine.
pub const MAX_THREADS: usize = 4;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

/// The pool, started on first use; `None` if no thread could be started.
fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<&'static Pool>> = OnceLock::new();
    *POOL.get_or_init(|| {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        }));
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_THREADS);
        let started = (0..threads)
            .filter(|i| {
                std::thread::Builder::new()
                    .name(format!("watch-decode-{i}"))
                    .spawn(move || work(pool))
                    .is_ok()
            })
            .count();
        (started > 0).then_some(pool)
    })
}

/// One decode thread: runs jobs as they come, for the life of the process.
fn work(pool: &'static Pool) {
    loop {
        let job = {
            let mut queue = pool.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(job) = queue.pop_front() {
                    break job;
                }
                queue = pool.ready.wait(queue).unwrap_or_else(|e| e.into_inner());
            }
        };
        // A panicking job drops its result sender (its stream then ends with an error);
        // the thread lives on for the others.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

/// Runs `work(input)` on a decode thread; the receiver yields its result. Gives `input`
/// back if there is no decode thread (none could be started), for the caller to do the
/// work in place.
pub fn submit<I, R, F>(input: I, work: F) -> Result<tokio::sync::oneshot::Receiver<R>, I>
where
    I: Send + 'static,
    R: Send + 'static,
    F: FnOnce(I) -> R + Send + 'static,
{
    let Some(pool) = pool() else {
        return Err(input);
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        // The receiver may be gone (its stream was dropped): the result is then dropped.
        let _ = tx.send(work(input));
    });
    pool.queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push_back(job);
    pool.ready.notify_one();
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_off_the_caller_and_return_their_results() {
        let caller = std::thread::current().id();
        let receivers: Vec<_> = (0..16)
            .map(|i| {
                submit(i, |i| (i, std::thread::current().id()))
                    .unwrap_or_else(|_| panic!("no decode thread"))
            })
            .collect();
        for (i, rx) in receivers.into_iter().enumerate() {
            let (n, thread) = rx.await.unwrap();
            assert_eq!(n, i);
            assert_ne!(thread, caller);
        }
    }

    #[tokio::test]
    async fn a_panicking_job_fails_alone() {
        let failed = submit((), |()| -> u32 { panic!("decode bug") })
            .unwrap_or_else(|_| panic!("no decode thread"));
        assert!(failed.await.is_err(), "the sender is dropped");
        // The threads still serve later jobs.
        for _ in 0..MAX_THREADS * 2 {
            let rx = submit(7u32, |n| n).unwrap_or_else(|_| panic!("no decode thread"));
            assert_eq!(rx.await.unwrap(), 7);
        }
    }
}
