//! Lists served by a cacher: from the watch cache's current state when it is fresh enough,
//! else from storage at a revision (paging continuations, consistent reads the cache could not
//! prove quickly). Owns list pages, continue tokens and the remembered page counts; it assumes
//! the cacher's state lock is taken only for the time of one page.

use super::cached_object::CachedObject;
use super::cacher::{storage_status, Cacher};
use super::filter::Filter;
use super::watch_cache::WatchCache;
use api::Status;
use std::sync::Arc;
use storage::{RangeRequest, StorageError};

/// One page of a list.
#[derive(Debug)]
pub struct ListResult {
    /// Matching objects in key order.
    pub items: Vec<Arc<CachedObject>>,
    /// The resourceVersion the list is consistent at.
    pub resource_version: u64,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
    /// Objects left after this page, when known.
    pub remaining: Option<u64>,
}

/// How many objects a cache-served list has from `start` on (inclusive), at `rv` under
/// `prefix`: remembered so that the next page's `remainingItemCount` costs nothing.
pub(super) struct PageCount {
    rv: u64,
    prefix: String,
    start: String,
    from_start: u64,
}

/// Lists being paged through at once whose counts are remembered.
const PAGE_COUNT_MEMO: usize = 64;

impl Cacher {
    /// A consistent list (no resourceVersion): at least as fresh as storage's current
    /// revision — from the cache when it proves that freshness quickly, else from storage at
    /// that revision (as kube-apiserver does when its cache cannot).
    pub async fn list_consistent(
        &self,
        filter: &Filter,
        limit: usize,
    ) -> Result<ListResult, Status> {
        match self.try_consistent().await? {
            (_, true) => Ok(self.list_from_cache(filter, "", limit)),
            (rev, false) => self.list_from_storage(filter, rev, "", limit, false).await,
        }
    }

    /// Lists from the cache's current state: objects with key ≥ `start_key` that pass
    /// `filter`, at most `limit` (0 = all). The continue token points into storage at the
    /// same resourceVersion.
    pub fn list_from_cache(&self, filter: &Filter, start_key: &str, limit: usize) -> ListResult {
        self.touch();
        self.list_in(&self.state.read(), filter, start_key, limit)
    }

    /// Serves a continuation page at `rv`: from the cache while it is still exactly at `rv`
    /// (nothing under this resource changed since the first page, so its state *is* the
    /// state at `rv` — a page then costs O(page), not a storage range), else from storage
    /// at `rv`.
    pub async fn list_continue(
        &self,
        filter: &Filter,
        rv: u64,
        start_key: &str,
        limit: usize,
    ) -> Result<ListResult, Status> {
        self.touch();
        {
            let state = self.state.read();
            if state.resource_version() == rv {
                return Ok(self.list_in(&state, filter, start_key, limit));
            }
        }
        self.list_from_storage(filter, rv, start_key, limit, true)
            .await
    }

    pub(super) fn list_in(
        &self,
        state: &WatchCache,
        filter: &Filter,
        start_key: &str,
        limit: usize,
    ) -> ListResult {
        let rv = state.resource_version();
        let prefix = match (&filter.namespace, self.info.namespaced) {
            (Some(ns), true) => format!("{ns}/"),
            _ => String::new(),
        };
        let begin = if start_key > prefix.as_str() {
            start_key.to_string()
        } else {
            prefix.clone()
        };
        let mut items = Vec::new();
        let mut iter = state
            .range_from(&begin)
            .take_while(|o| o.key.starts_with(&prefix));
        let mut more = false;
        for o in iter.by_ref() {
            if !filter.matches(o) {
                continue;
            }
            if limit > 0 && items.len() == limit {
                more = true;
                break;
            }
            items.push(o.clone());
        }
        let mut remaining = None;
        let continue_token = if more {
            let token = items.last().map(|last| continue_after(rv, &last.key));
            if filter.is_unfiltered() {
                // The object we stopped at plus whatever follows it. Counting that is a walk
                // over the rest of the collection, so each count is remembered for the next
                // page of the same list: it then only subtracts what it served.
                let counts = &mut *self.page_counts.lock();
                let known = counts
                    .iter()
                    .find(|c| c.rv == rv && c.prefix == prefix && c.start == start_key)
                    .map(|c| c.from_start);
                let n = match known {
                    Some(from_start) => from_start.saturating_sub(items.len() as u64),
                    None => 1 + iter.count() as u64,
                };
                remaining = Some(n);
                if let Some(last) = items.last() {
                    if counts.len() == PAGE_COUNT_MEMO {
                        counts.pop_front();
                    }
                    counts.push_back(PageCount {
                        rv,
                        prefix: prefix.clone(),
                        start: format!("{}\u{0}", last.key),
                        from_start: n,
                    });
                }
            }
            token
        } else {
            None
        };
        ListResult {
            items,
            resource_version: rv,
            continue_token,
            remaining,
        }
    }

    /// Lists from storage at exactly `rv` (pagination continuations and `Exact` reads).
    /// A compacted `rv` is 410 Expired, worded for a continue token when `from_continue`.
    pub async fn list_from_storage(
        &self,
        filter: &Filter,
        rv: u64,
        start_key: &str,
        limit: usize,
        from_continue: bool,
    ) -> Result<ListResult, Status> {
        let ns_prefix = match (&filter.namespace, self.info.namespaced) {
            (Some(ns), true) => format!("{}{ns}/", self.prefix),
            _ => self.prefix.clone(),
        };
        let mut start = format!("{}{}", self.prefix, start_key);
        if start < ns_prefix {
            start = ns_prefix.clone();
        }
        let end = storage::prefix_end(ns_prefix.as_bytes());
        let mut items = Vec::new();
        let page = if limit == 0 {
            1000
        } else {
            // Storage is read in chunks; the loop gathers up to `limit` matching items.
            limit.saturating_add(1).clamp(100, 10_000)
        };
        let mut more_in_storage = true;
        let mut stopped_early = false;
        let mut read_rv = rv;
        let mut total_from_start: Option<usize> = None;
        'outer: while more_in_storage {
            let resp = self
                .storage
                .range(RangeRequest {
                    start: start.clone().into_bytes().into(),
                    end: end.clone(),
                    revision: rv,
                    limit: page,
                })
                .await
                .map_err(|e| match e {
                    StorageError::Compacted { .. } if from_continue => Status::continue_expired(),
                    StorageError::FutureRevision { requested, current } => {
                        Status::resource_version_too_large(requested, current)
                    }
                    other => storage_status(other),
                })?;
            read_rv = resp.revision;
            more_in_storage = resp.more;
            // Each read must move past where it started (`start` is still that key here), or
            // the next would start there again: a loop without end on a store that breaks
            // its contract.
            if resp.more
                && resp
                    .kvs
                    .last()
                    .is_none_or(|kv| kv.key[..] <= *start.as_bytes())
            {
                return Err(Status::internal(format!(
                    "storage said more keys follow {start:?} but returned none after it"
                )));
            }
            total_from_start.get_or_insert(resp.count);
            for kv in &resp.kvs {
                let key = String::from_utf8_lossy(&kv.key[self.prefix.len().min(kv.key.len())..])
                    .into_owned();
                start = format!("{}{}\u{0}", self.prefix, key);
                let obj = match self.decode(&key, &kv.value, kv.mod_revision) {
                    Ok(o) => o,
                    Err(e) => {
                        tracing::error!(resource = self.info.resource, "{e}");
                        continue;
                    }
                };
                if !filter.matches(&obj) {
                    continue;
                }
                if limit > 0 && items.len() == limit {
                    stopped_early = true;
                    break 'outer;
                }
                items.push(Arc::new(obj));
            }
        }
        let continue_token = if stopped_early {
            items.last().map(|l| continue_after(read_rv, &l.key))
        } else {
            None
        };
        // Like kube-apiserver, the count of what is left is only given for unfiltered lists,
        // where it is exact: every key from the page's start onwards is an item.
        let remaining = match (stopped_early && filter.is_unfiltered(), total_from_start) {
            (true, Some(total)) => Some(total.saturating_sub(items.len()) as u64),
            _ => None,
        };
        Ok(ListResult {
            items,
            resource_version: read_rv,
            continue_token,
            remaining,
        })
    }
}

/// A continue token that resumes right after `last_key` at `rv`.
pub(super) fn continue_after(rv: u64, last_key: &str) -> String {
    api::continue_token::ContinueToken {
        resource_version: rv,
        start_key: format!("{last_key}\u{0}"),
    }
    .encode()
}
