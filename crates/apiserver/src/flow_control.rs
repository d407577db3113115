//! Overload protection: API Priority and Fairness in spirit. Every request that is not a
//! watch needs a seat while it runs. Seats are kube-apiserver's max-in-flight limits (400
//! read-only plus 200 mutating by default) shared among priority levels: the control plane
//! (nodes, scheduler, controller-manager, leader election) and workloads (everyone else).
//! Members of `system:masters` and unauthenticated listeners are exempt.
//!
//! When a level's seats are taken, a request waits in one of the level's queues: its flow
//! (the user) is dealt a hand of queues by shuffle sharding and joins the shortest, and a
//! freed seat goes to the queues in turn. So one user flooding the server fills only their
//! own few queues; another user's request waits behind at most one request per busy queue.
//! A full queue, or a wait past [`MAX_QUEUE_WAIT`], is answered 429 with `Retry-After`.

use crate::auth::user_info::{UserInfo, GROUP_NODES};
use api::Status;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Queues per priority level (kube-apiserver's default for its levels).
const QUEUES: usize = 64;
/// Queues a flow is dealt (kube-apiserver's default hand size).
const HAND_SIZE: usize = 6;
/// Requests one queue holds; more are refused at once.
const QUEUE_LENGTH: usize = 50;
/// The longest a request waits for a seat before it is refused.
pub const MAX_QUEUE_WAIT: Duration = Duration::from_secs(15);
/// What a refused client is told to wait, in seconds.
const RETRY_AFTER: u32 = 1;

/// The limits (kube-apiserver's `--max-requests-inflight` and
/// `--max-mutating-requests-inflight`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Read-only requests in flight.
    pub read_only: usize,
    /// Mutating requests in flight.
    pub mutating: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            read_only: 400,
            mutating: 200,
        }
    }
}

struct Waiter {
    id: u64,
    tx: oneshot::Sender<()>,
}

#[derive(Default)]
struct LevelState {
    in_use: usize,
    queued: usize,
    queues: Vec<VecDeque<Waiter>>,
    /// The queue the next freed seat is offered to first.
    next: usize,
    next_id: u64,
}

/// One priority level: its seats and queues.
struct Level {
    name: &'static str,
    seats: usize,
    state: Mutex<LevelState>,
    hasher: foldhash::fast::FixedState,
}

impl Level {
    fn new(name: &'static str, seats: usize) -> Arc<Level> {
        Arc::new(Level {
            name,
            seats: seats.max(1),
            state: Mutex::new(LevelState {
                queues: (0..QUEUES).map(|_| VecDeque::new()).collect(),
                ..LevelState::default()
            }),
            hasher: foldhash::fast::FixedState::with_seed(0x6c77_6170_665f_7631),
        })
    }

    /// The queue a flow joins: the shortest of the hand its hash deals it.
    fn queue_for(&self, state: &LevelState, flow: &str) -> usize {
        let mut bits = self.hasher.hash_one(flow);
        let mut best = usize::MAX;
        let mut best_len = usize::MAX;
        let mut dealt = [usize::MAX; HAND_SIZE];
        for i in 0..HAND_SIZE {
            // Deal a queue not dealt yet.
            let mut q = (bits % QUEUES as u64) as usize;
            bits = bits.rotate_right(11) ^ 0x9e37_79b9_7f4a_7c15;
            while dealt[..i].contains(&q) {
                q = (q + 1) % QUEUES;
            }
            dealt[i] = q;
            let len = state.queues[q].len();
            if len < best_len {
                best = q;
                best_len = len;
            }
        }
        best
    }

    fn release(&self) {
        let mut st = self.state.lock();
        // Offer the seat to the queues in turn; a waiter that gave up is skipped.
        for _ in 0..QUEUES {
            let q = st.next;
            st.next = (st.next + 1) % QUEUES;
            while let Some(w) = st.queues[q].pop_front() {
                st.queued -= 1;
                if w.tx.send(()).is_ok() {
                    return;
                }
            }
        }
        st.in_use -= 1;
    }
}

/// A request waiting in a queue. However its wait ends — granted, timed out, or the request
/// dropped (its client went away) — it leaves no trace: dropped while queued it leaves the
/// queue, and a seat handed to it that it never took is given back.
struct Waiting {
    level: Arc<Level>,
    id: u64,
    queue: usize,
    rx: oneshot::Receiver<()>,
    /// Set once the outcome has been taken care of by [`FlowControl::acquire`].
    done: bool,
}

impl Waiting {
    /// Leaves the queue; true if a seat had been handed over already (the caller owns it).
    fn leave(&mut self) -> bool {
        let mut st = self.level.state.lock();
        let q = &mut st.queues[self.queue];
        let before = q.len();
        q.retain(|w| w.id != self.id);
        if q.len() < before {
            st.queued -= 1;
            return false;
        }
        drop(st);
        // Not queued any more: release() popped it, and sent the seat under the lock.
        self.rx.try_recv().is_ok()
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.done && self.leave() {
            self.level.release();
        }
    }
}

/// A seat held while a request runs; dropping it frees it for the next waiting request.
pub struct Seat(Option<Arc<Level>>);

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(level) = self.0.take() {
            level.release();
        }
    }
}

/// The server's priority levels.
pub struct FlowControl {
    /// Control plane: nodes, scheduler, controller-manager, ServiceAccounts of kube-system.
    system: Arc<Level>,
    /// Everyone else.
    workload: Arc<Level>,
}

impl std::fmt::Debug for FlowControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowControl")
            .field("system_seats", &self.system.seats)
            .field("workload_seats", &self.workload.seats)
            .finish()
    }
}

impl FlowControl {
    /// Levels sharing `limits`' seats: 40 % to the control plane, 60 % to workloads.
    pub fn new(limits: Limits) -> FlowControl {
        let total = limits.read_only + limits.mutating;
        let system = total * 2 / 5;
        FlowControl {
            system: Level::new("system", system),
            workload: Level::new("workload", total - system),
        }
    }

    fn level_of(&self, user: &UserInfo) -> &Arc<Level> {
        let control_plane = user.in_group(GROUP_NODES)
            || matches!(
                user.name.as_str(),
                "system:kube-scheduler" | "system:kube-controller-manager"
            )
            || user
                .service_account_name()
                .is_some_and(|(ns, _)| ns == "kube-system");
        if control_plane {
            &self.system
        } else {
            &self.workload
        }
    }

    /// A seat for a request of `user` (a flow of its own), waiting in its queue if need be;
    /// `None` for users exempt from limits (`system:masters`).
    ///
    /// # Errors
    /// 429 with `Retry-After` if its queue is full or the wait exceeds [`MAX_QUEUE_WAIT`].
    pub async fn acquire(&self, user: &UserInfo) -> Result<Option<Seat>, Status> {
        if user.is_master() {
            return Ok(None);
        }
        let level = self.level_of(user).clone();
        let (id, rx, q) = {
            let mut st = level.state.lock();
            if st.in_use < level.seats && st.queued == 0 {
                st.in_use += 1;
                return Ok(Some(Seat(Some(level.clone()))));
            }
            let q = level.queue_for(&st, &user.name);
            if st.queues[q].len() >= QUEUE_LENGTH {
                tracing::debug!(level = level.name, user = %user.name, "queue full: 429");
                return Err(Status::too_many_requests(RETRY_AFTER));
            }
            let (tx, rx) = oneshot::channel();
            st.next_id += 1;
            let id = st.next_id;
            st.queues[q].push_back(Waiter { id, tx });
            st.queued += 1;
            (id, rx, q)
        };
        let mut waiting = Waiting {
            level,
            id,
            queue: q,
            rx,
            done: false,
        };
        let granted = matches!(
            tokio::time::timeout(MAX_QUEUE_WAIT, &mut waiting.rx).await,
            Ok(Ok(()))
        );
        waiting.done = true;
        if granted {
            return Ok(Some(Seat(Some(waiting.level.clone()))));
        }
        match waiting.leave() {
            // Handed a seat just as the wait ended: it is ours.
            true => Ok(Some(Seat(Some(waiting.level.clone())))),
            false => Err(Status::too_many_requests(RETRY_AFTER)),
        }
    }

    /// Seats in use and requests waiting, per level (for metrics and tests).
    pub fn occupancy(&self) -> [(&'static str, usize, usize); 2] {
        [&self.system, &self.workload].map(|l| {
            let st = l.state.lock();
            (l.name, st.in_use, st.queued)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> UserInfo {
        UserInfo::authenticated(name, vec![])
    }

    #[tokio::test]
    async fn seats_are_shared_fairly_between_flows() {
        let fc = Arc::new(FlowControl::new(Limits {
            read_only: 3,
            mutating: 2,
        }));
        // The workload level has 3 seats: a flooder takes them all and queues 30 more.
        let flooder = user("flooder");
        let mut pool = Vec::new();
        for _ in 0..3 {
            pool.push(fc.acquire(&flooder).await.unwrap().unwrap());
        }
        let mut waiting = Vec::new();
        for _ in 0..30 {
            let fc = fc.clone();
            let u = flooder.clone();
            waiting.push(tokio::spawn(async move { fc.acquire(&u).await }));
        }
        while fc.occupancy()[1].2 < 30 {
            tokio::task::yield_now().await;
        }
        // Another user's request waits in a queue of its own, which a freed seat reaches
        // after at most one turn of the busy queues: the flooder's hand, HAND_SIZE of them.
        let fc2 = fc.clone();
        let other = tokio::spawn(async move { fc2.acquire(&user("other")).await });
        while fc.occupancy()[1].2 < 31 {
            tokio::task::yield_now().await;
        }
        let mut releases = 0;
        while !other.is_finished() {
            assert!(
                releases <= HAND_SIZE + 1,
                "other still waits after {releases} releases"
            );
            drop(pool.pop());
            releases += 1;
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            // Seats the flooder's waiters got are released in turn.
            let mut still = Vec::new();
            for w in waiting.drain(..) {
                if w.is_finished() {
                    pool.push(w.await.unwrap().unwrap().unwrap());
                } else {
                    still.push(w);
                }
            }
            waiting = still;
        }
        assert!(other.await.unwrap().unwrap().is_some());
        // Masters are exempt; the control plane has seats of its own.
        let root = UserInfo::authenticated("root", vec!["system:masters".into()]);
        assert!(fc.acquire(&root).await.unwrap().is_none());
        let node = UserInfo::authenticated("system:node:n1", vec!["system:nodes".into()]);
        assert!(fc.acquire(&node).await.unwrap().is_some());
        for w in waiting {
            w.abort();
        }
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_leaves_no_seat_behind() {
        let fc = Arc::new(FlowControl::new(Limits {
            read_only: 1,
            mutating: 0,
        }));
        let u = user("u");
        let held = fc.acquire(&u).await.unwrap().unwrap();
        // Two waiters: one cancelled while queued, one cancelled after a seat was handed to
        // it but before it ran.
        let queued = {
            let (fc, u) = (fc.clone(), u.clone());
            tokio::spawn(async move { fc.acquire(&u).await.map(|_| ()) })
        };
        let granted = {
            let (fc, u) = (fc.clone(), u.clone());
            tokio::spawn(async move { fc.acquire(&u).await.map(|_| ()) })
        };
        while fc.occupancy()[1].2 < 2 {
            tokio::task::yield_now().await;
        }
        queued.abort();
        let _ = queued.await;
        assert_eq!(
            fc.occupancy()[1].2,
            1,
            "the cancelled waiter left its queue"
        );
        // On this single-threaded runtime the freed seat is sent to `granted`, which has not
        // run since: cancelling it now must give the seat back.
        drop(held);
        granted.abort();
        let _ = granted.await;
        assert_eq!(fc.occupancy()[1], ("workload", 0, 0), "no seat leaked");
        assert!(fc.acquire(&u).await.unwrap().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_or_a_long_wait_is_a_429() {
        let fc = Arc::new(FlowControl::new(Limits {
            read_only: 1,
            mutating: 0,
        }));
        let u = user("u");
        let _seat = fc.acquire(&u).await.unwrap().unwrap();
        // The flow's hand of queues holds HAND_SIZE × QUEUE_LENGTH waiters; then 429 at once.
        let mut waiters = Vec::new();
        for _ in 0..HAND_SIZE * QUEUE_LENGTH {
            let fc = fc.clone();
            let u = u.clone();
            waiters.push(tokio::spawn(
                async move { fc.acquire(&u).await.map(|_| ()) },
            ));
        }
        while fc.occupancy()[1].2 < HAND_SIZE * QUEUE_LENGTH {
            tokio::task::yield_now().await;
        }
        let e = fc.acquire(&u).await.err().unwrap();
        assert_eq!(e.code(), 429);
        assert_eq!(e.retry_after, Some(1));
        // The waiters give up after MAX_QUEUE_WAIT, each with a 429, and leave the queues.
        tokio::time::advance(MAX_QUEUE_WAIT + Duration::from_secs(1)).await;
        for w in waiters {
            assert_eq!(w.await.unwrap().unwrap_err().code(), 429);
        }
        assert_eq!(fc.occupancy()[1].2, 0);
        assert_eq!(fc.occupancy()[1].1, 1);
    }
}
