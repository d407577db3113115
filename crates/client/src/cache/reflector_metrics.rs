//! `ReflectorMetrics`: what one [`Reflector`](crate::cache::Reflector) has done so far —
//! its lists and the items they brought, its watches and their events, the watches that
//! ended at once, the 410 Gone answers and the relists they cause — so that a program can
//! see when, and how often, a cache is rebuilt from a full list.
//!
//! The idea is client-go's reflector metrics (lists, items per list, watches, items per
//! watch, short watches); the 410 and relist counters are added because a relist is the
//! expensive event an operator wants to see. Every figure is a counter: it only grows, from
//! zero when the reflector is built. Counting is a relaxed atomic add on the reflector's
//! task (once per burst of events, not per event); reading is
//! [`Reflector::metrics`](crate::cache::Reflector::metrics), a copy of the counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of one reflector's counters (see the [module docs](self)). Each field only
/// grows over the reflector's life; subtract two snapshots for a rate. The fields are read
/// one by one, so a snapshot taken while the reflector runs may be a few events apart
/// between fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReflectorMetrics {
    /// Lists started: each cycle's list (all its pages count once), and each restart of a
    /// list within a cycle (at the newest version after a 410, or unpaged after an expired
    /// continue token). A watch-list's initial events are not a list.
    pub lists: u64,
    /// Objects received by lists, over all their pages.
    pub items_listed: u64,
    /// Watches opened (the server accepted the request), watch-list requests included.
    pub watches: u64,
    /// Watch events received, bookmarks and a watch-list's initial events included.
    pub events: u64,
    /// Watches that ended cleanly within a second without delivering any event (client-go's
    /// "very short watch"): a sign of a server or proxy closing watches at once.
    pub short_watches: u64,
    /// 410 Gone (`Expired`) answers: to a list, to a watch request, or as an error event on
    /// an open watch. Each means the asked-for resourceVersion is no longer available.
    pub gone: u64,
    /// List + watch cycles started after the reflector's state was once complete (a list or
    /// a watch-list reached its end): each rebuilds the cache from a full list, usually
    /// after a 410 or an error that ended the cycle.
    pub relists: u64,
}

/// The live counters behind [`ReflectorMetrics`], updated by the reflector.
#[derive(Debug, Default)]
pub(crate) struct ReflectorCounters {
    lists: AtomicU64,
    items_listed: AtomicU64,
    watches: AtomicU64,
    events: AtomicU64,
    short_watches: AtomicU64,
    gone: AtomicU64,
    relists: AtomicU64,
}

/// Adds `n` to `counter`. Relaxed: the counters order nothing else.
fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl ReflectorCounters {
    /// A list (or a restart of one) begins.
    pub(crate) fn list_started(&self) {
        bump(&self.lists, 1);
    }

    /// A list page brought `n` objects.
    pub(crate) fn items_listed(&self, n: usize) {
        bump(&self.items_listed, n as u64);
    }

    /// A watch was opened.
    pub(crate) fn watch_started(&self) {
        bump(&self.watches, 1);
    }

    /// `n` watch events arrived.
    pub(crate) fn events(&self, n: usize) {
        bump(&self.events, n as u64);
    }

    /// A watch ended at once, without an event.
    pub(crate) fn short_watch(&self) {
        bump(&self.short_watches, 1);
    }

    /// The server answered 410 Gone.
    pub(crate) fn gone(&self) {
        bump(&self.gone, 1);
    }

    /// A cycle began after the state had once been complete.
    pub(crate) fn relist(&self) {
        bump(&self.relists, 1);
    }

    /// A copy of the counters.
    pub(crate) fn snapshot(&self) -> ReflectorMetrics {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ReflectorMetrics {
            lists: read(&self.lists),
            items_listed: read(&self.items_listed),
            watches: read(&self.watches),
            events: read(&self.events),
            short_watches: read(&self.short_watches),
            gone: read(&self.gone),
            relists: read(&self.relists),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_counter_lands_in_its_own_field() {
        let c = ReflectorCounters::default();
        assert_eq!(c.snapshot(), ReflectorMetrics::default());
        c.list_started();
        c.items_listed(3);
        c.items_listed(2);
        c.watch_started();
        c.watch_started();
        c.events(7);
        c.short_watch();
        c.gone();
        c.gone();
        c.gone();
        c.relist();
        assert_eq!(
            c.snapshot(),
            ReflectorMetrics {
                lists: 1,
                items_listed: 5,
                watches: 2,
                events: 7,
                short_watches: 1,
                gone: 3,
                relists: 1,
            }
        );
    }
}
