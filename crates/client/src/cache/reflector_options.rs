//! [`ReflectorOptions`]: what a [`Reflector`](crate::cache::Reflector) is configured with,
//! and [`ConfigureReflector`], its chained setters, written once.
//!
//! Two builders make a reflector: [`ReflectorBuilder`](crate::cache::reflector::ReflectorBuilder)
//! directly, and [`InformerBuilder`](crate::cache::InformerBuilder) for the reflector inside
//! an informer. Each holds one `ReflectorOptions` next to what is its own (the source and
//! queue; the indexers), and both get the same setters — `name`, `clock`, `page_size`,
//! `watch_list`, `list_backpressure`, `transform`, `resync_period`, `backoff` and the
//! whole-struct `reflector_options` — from the [`ConfigureReflector`] trait. Bring it into
//! scope to call them: `use client::cache::ConfigureReflector as _;`.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use client::cache::{
//!     ConfigureReflector as _, FakeListerWatcher, ReflectorOptions, SharedIndexInformer,
//! };
//! use client::object::DynamicObject;
//!
//! // One set of settings, built apart from any informer…
//! let options = ReflectorOptions::<DynamicObject>::default()
//!     .name("pods")
//!     .page_size(100)
//!     .resync_period(Duration::from_secs(300));
//! assert_eq!(options.page_size, 100);
//!
//! // …and handed to a builder whole, then adjusted with the same setters.
//! let source = Arc::new(FakeListerWatcher::<DynamicObject>::new());
//! let informer = SharedIndexInformer::builder(source)
//!     .reflector_options(options)
//!     .watch_list(true)
//!     .build();
//! assert_eq!(informer.name(), "pods");
//! ```

use crate::cache::backoff::Backoff;
use crate::cache::reflector::{Transform, DEFAULT_PAGE_SIZE};
use crate::clock::{RealClock, SharedClock};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What a reflector is configured with. `Default` is: named `"reflector"`, real time, pages
/// of [`DEFAULT_PAGE_SIZE`], list + watch (no watch-list), the owner's backpressure default,
/// no transform, no resync, client-go's backoff policy on the options' clock.
///
/// Set the fields directly or through the [`ConfigureReflector`] setters, which
/// `ReflectorOptions` implements as the builders do. Not `Clone`: a [`Backoff`] carries the
/// state of one reflector's retries (its current delay, its random jitter), which two
/// reflectors must not share; make one `ReflectorOptions` per reflector (a function that
/// returns them does for several).
#[must_use]
pub struct ReflectorOptions<K> {
    /// A name for log lines. An informer's name is this too (its
    /// [`SharedIndexInformer::name`](crate::cache::SharedIndexInformer::name), and the
    /// name a factory reports its sync under).
    pub name: String,
    /// The clock for backoff, resync and short-watch detection (and, in an informer, for
    /// its handlers' resync timing). Default: real time.
    pub clock: SharedClock,
    /// The page size of the reflector's lists; 0 = no paging (one request for everything).
    /// Default [`DEFAULT_PAGE_SIZE`].
    pub page_size: u32,
    /// Try watch-list mode (`sendInitialEvents`: the current state streamed as watch
    /// events) before falling back to list + watch. Default off.
    pub watch_list: bool,
    /// Before asking for the next page of a paged list, wait until the queue holds at most
    /// two pages' worth of keys, so a relist never holds much more than the old cache plus
    /// a few pages. It needs a running consumer of the queue. `None` (the default) = the
    /// owner decides: on in an informer (whose process loop always consumes its queue),
    /// off for a bare reflector (whose queue may have no consumer).
    pub list_backpressure: Option<bool>,
    /// A pure function applied to every object received from the server before it is
    /// queued (and so before an informer caches it), e.g. to drop fields nobody reads. It
    /// may return the same `Arc` unchanged. Default none.
    pub transform: Option<Transform<K>>,
    /// The resync period; zero (the default) = never. For a bare reflector, how often it
    /// resyncs its queue while it watches. For an informer, the resync period of handlers
    /// registered without one of their own; the reflector then resyncs as often as the
    /// handler that asks most often needs (see
    /// [`SharedIndexInformer::resync_check_period`](crate::cache::SharedIndexInformer::resync_check_period)).
    pub resync_period: Duration,
    /// The backoff between failed lists and watches. `None` (the default) = [`Backoff::new`]
    /// on [`clock`](Self::clock), made when the reflector is built.
    pub backoff: Option<Backoff>,
}

impl<K> Default for ReflectorOptions<K> {
    fn default() -> Self {
        ReflectorOptions {
            name: "reflector".to_string(),
            clock: RealClock::shared(),
            page_size: DEFAULT_PAGE_SIZE,
            watch_list: false,
            list_backpressure: None,
            transform: None,
            resync_period: Duration::ZERO,
            backoff: None,
        }
    }
}

impl<K> fmt::Debug for ReflectorOptions<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReflectorOptions")
            .field("name", &self.name)
            .field("clock", &self.clock)
            .field("page_size", &self.page_size)
            .field("watch_list", &self.watch_list)
            .field("list_backpressure", &self.list_backpressure)
            .field("transform", &self.transform.as_ref().map(|_| "Fn"))
            .field("resync_period", &self.resync_period)
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// The chained setters of a reflector's settings, written once for everything that holds a
/// [`ReflectorOptions`]: [`ReflectorOptions`] itself,
/// [`ReflectorBuilder`](crate::cache::reflector::ReflectorBuilder) and
/// [`InformerBuilder`](crate::cache::InformerBuilder).
///
/// An implementor provides only [`reflector_options_mut`](Self::reflector_options_mut);
/// each provided setter changes one field of those options (whose documentation states
/// what the setting does) and hands the implementor back. Import the trait to call them,
/// e.g. `use client::cache::ConfigureReflector as _;`.
pub trait ConfigureReflector<K>: Sized {
    /// The options the setters change.
    fn reflector_options_mut(&mut self) -> &mut ReflectorOptions<K>;

    /// Replaces every reflector setting at once with `options` (the name included);
    /// setters called afterwards adjust them.
    fn reflector_options(mut self, options: ReflectorOptions<K>) -> Self {
        *self.reflector_options_mut() = options;
        self
    }

    /// A name for log lines, and an informer's name ([`ReflectorOptions::name`]).
    fn name(mut self, name: impl Into<String>) -> Self {
        self.reflector_options_mut().name = name.into();
        self
    }

    /// The clock for backoff, resync and short-watch detection
    /// ([`ReflectorOptions::clock`]; default: real time).
    fn clock(mut self, clock: SharedClock) -> Self {
        self.reflector_options_mut().clock = clock;
        self
    }

    /// The list page size ([`ReflectorOptions::page_size`]; default [`DEFAULT_PAGE_SIZE`],
    /// 0 = no paging).
    fn page_size(mut self, page_size: u32) -> Self {
        self.reflector_options_mut().page_size = page_size;
        self
    }

    /// Try watch-list mode (`sendInitialEvents`) before falling back to list + watch
    /// ([`ReflectorOptions::watch_list`]).
    fn watch_list(mut self, enabled: bool) -> Self {
        self.reflector_options_mut().watch_list = enabled;
        self
    }

    /// Whether a paged list waits for room in the queue between pages
    /// ([`ReflectorOptions::list_backpressure`]; unset = on in an informer, off for a bare
    /// reflector).
    fn list_backpressure(mut self, enabled: bool) -> Self {
        self.reflector_options_mut().list_backpressure = Some(enabled);
        self
    }

    /// A pure function applied to every object received from the server before it is
    /// queued and cached ([`ReflectorOptions::transform`]), replacing any set before.
    fn transform(mut self, transform: impl Fn(Arc<K>) -> Arc<K> + Send + Sync + 'static) -> Self {
        self.reflector_options_mut().transform = Some(Arc::new(transform));
        self
    }

    /// The resync period: a bare reflector's, or an informer's default for its handlers
    /// ([`ReflectorOptions::resync_period`]; zero, the default, = never).
    fn resync_period(mut self, period: Duration) -> Self {
        self.reflector_options_mut().resync_period = period;
        self
    }

    /// A backoff policy of its own ([`ReflectorOptions::backoff`]; default:
    /// [`Backoff::new`] on the options' clock).
    fn backoff(mut self, backoff: Backoff) -> Self {
        self.reflector_options_mut().backoff = Some(backoff);
        self
    }
}

impl<K> ConfigureReflector<K> for ReflectorOptions<K> {
    fn reflector_options_mut(&mut self) -> &mut ReflectorOptions<K> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::object::DynamicObject;

    #[test]
    fn setters_change_one_field_each() {
        let clock = FakeClock::new();
        let o = ReflectorOptions::<DynamicObject>::default();
        assert_eq!(o.name, "reflector");
        assert_eq!(o.page_size, DEFAULT_PAGE_SIZE);
        assert!(!o.watch_list && o.list_backpressure.is_none());
        assert!(o.transform.is_none() && o.backoff.is_none());
        assert_eq!(o.resync_period, Duration::ZERO);

        let o = o
            .name("pods")
            .clock(clock.shared())
            .page_size(7)
            .watch_list(true)
            .list_backpressure(false)
            .transform(|obj| obj)
            .resync_period(Duration::from_secs(30))
            .backoff(Backoff::new(clock.shared()));
        assert_eq!(o.name, "pods");
        assert_eq!(o.page_size, 7);
        assert!(o.watch_list);
        assert_eq!(o.list_backpressure, Some(false));
        assert!(o.transform.is_some() && o.backoff.is_some());
        assert_eq!(o.resync_period, Duration::from_secs(30));
        // The options' clock is the fake one: it moves with the fake time.
        let before = o.clock.now();
        clock.step(Duration::from_secs(5));
        assert_eq!(o.clock.since(before), Duration::from_secs(5));
        let debug = format!("{o:?}");
        assert!(
            debug.contains("\"pods\"") && debug.contains("page_size: 7"),
            "{debug}"
        );

        let replaced = ReflectorOptions::<DynamicObject>::default()
            .page_size(1)
            .reflector_options(o);
        assert_eq!((replaced.name.as_str(), replaced.page_size), ("pods", 7));
    }
}
