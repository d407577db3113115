//! Paged lists served from the watch cache: `remainingItemCount` on every page (counted once
//! per list, then carried from page to page), several lists paged at once, and every object
//! exactly once at one resourceVersion.

mod common;

use common::{enc, get, ok, post, rv_of, Factory, Memory};
use serde_json::json;

#[tokio::test]
async fn remaining_item_count_on_every_page_of_interleaved_lists() {
    let h = Memory.start(common::config(1000, 100)).await;
    let srv = &h.srv;
    let url = "/api/v1/namespaces/default/configmaps";
    for i in 0..10 {
        ok(
            "create",
            post(srv, url, &json!({"metadata": {"name": format!("c{i}")}})).await,
        );
    }
    // A consistent list first, so the cache holds all ten.
    ok("list", get(srv, url).await);
    // Two lists paged in lock step (3 and 4 per page) must not disturb each other's counts.
    let mut uris = [format!("{url}?limit=3"), format!("{url}?limit=4")];
    let mut remaining: [Vec<Option<u64>>; 2] = [Vec::new(), Vec::new()];
    let mut names: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut rvs: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let mut done = [false, false];
    while !(done[0] && done[1]) {
        for l in 0..2 {
            if done[l] {
                continue;
            }
            let page = ok("page", get(srv, &uris[l]).await);
            remaining[l].push(page["metadata"]["remainingItemCount"].as_u64());
            rvs[l].push(rv_of(&page));
            for it in page["items"].as_array().unwrap() {
                names[l].push(it["metadata"]["name"].as_str().unwrap().to_string());
            }
            let limit = if l == 0 { 3 } else { 4 };
            match page["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => {
                    uris[l] = format!("{url}?limit={limit}&continue={}", enc(c))
                }
                _ => done[l] = true,
            }
        }
    }
    assert_eq!(remaining[0], vec![Some(7), Some(4), Some(1), None]);
    assert_eq!(remaining[1], vec![Some(6), Some(2), None]);
    let all: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    for l in 0..2 {
        assert_eq!(names[l], all, "list {l}: every object once, in key order");
        assert!(
            rvs[l].iter().all(|rv| *rv == rvs[l][0]),
            "one resourceVersion"
        );
    }
}
