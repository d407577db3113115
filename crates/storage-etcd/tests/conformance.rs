//! The storage conformance suite against a real etcd.
//!
//! The suite checks revisions relative to the store's revision when each check starts, and
//! assumes nothing else writes meanwhile; etcd's revisions are cluster-wide, so each check
//! gets its own fresh etcd (they start in about a second and run in parallel). Each also uses
//! its own key namespace, which exercises the namespace mapping; one check runs without a
//! namespace.

mod common;

use common::EtcdServer;
use std::sync::Arc;
use storage::conformance;

macro_rules! check {
    ($name:ident, $prefix:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let etcd = EtcdServer::start().await;
            let s = etcd.storage($prefix).await;
            conformance::$name(Arc::new(s)).await;
        }
    };
}

check!(check_revisions_increase, "/conformance/revisions/");
check!(
    check_create_update_delete_preconditions,
    "/conformance/cas/"
);
check!(check_reads_at_old_revisions, "/conformance/old-reads/");
check!(check_range_paging_and_prefix, "");
check!(check_watch_replays_then_goes_live, "/conformance/replay/");
check!(
    check_watch_no_gap_under_concurrent_writes,
    "/conformance/no-gap/"
);
check!(check_watch_from_current_and_future, "/conformance/future/");
check!(check_compaction, "/conformance/compaction/");
check!(check_slow_watcher_overflows, "/conformance/overflow/");
