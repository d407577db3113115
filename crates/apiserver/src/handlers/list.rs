//! LIST: served from the watch cache (or from storage at an exact version for paging), and
//! streamed out without re-encoding the items.
//!
//! Which resourceVersion rules pick which source (kube-apiserver's): unset — consistent,
//! from the cache once it has caught up with storage, paged by `limit`; `"0"` — any state,
//! the cache's, whole (`limit` is ignored); `N` with a limit, or `resourceVersionMatch=Exact`
//! — storage at exactly `N`, paged; `N` otherwise — the cache once it is at least at `N`.

use super::state::ApiServer;
use super::{build_filter, RequestInfo};
use crate::cacher::list::ListResult;
use crate::encoding::body::{list_body, list_body_with, Body};
use crate::encoding::negotiate::Output;
use crate::encoding::table;
use api::list_options::{ListOptions, ResourceVersion, ResourceVersionMatch};
use api::Status;
use http::{HeaderValue, Response};

/// Handles `GET` on a collection without `watch`, rendering the page as `output`.
pub async fn list(
    srv: &ApiServer,
    req: &RequestInfo,
    opts: &ListOptions,
    output: Output,
) -> Result<Response<Body>, Status> {
    let cacher = srv.cacher(req.info)?;
    let filter = build_filter(req, opts)?;
    let limit = usize::try_from(opts.limit.unwrap_or(0)).unwrap_or(usize::MAX);
    let result = if let Some(tok) = &opts.continue_token {
        cacher
            .list_continue(&filter, tok.resource_version, &tok.start_key, limit)
            .await?
    } else {
        match (opts.resource_version, opts.resource_version_match) {
            (ResourceVersion::Unset, _) => cacher.list_consistent(&filter, limit).await?,
            (ResourceVersion::Any, _) => {
                // Whole, whatever the limit, as kube-apiserver serves "0" from its cache: a
                // client then sees one page and never switches to paged relists, which are
                // served at exactly the version asked for (see the reflector).
                cacher.wait_until_fresh(0).await?;
                cacher.list_from_cache(&filter, "", 0)
            }
            (ResourceVersion::AtLeast(n), Some(ResourceVersionMatch::Exact)) => {
                cacher
                    .list_from_storage(&filter, n, "", limit, false)
                    .await?
            }
            (ResourceVersion::AtLeast(n), None) if limit > 0 => {
                cacher
                    .list_from_storage(&filter, n, "", limit, false)
                    .await?
            }
            (ResourceVersion::AtLeast(n), _) => {
                cacher.wait_until_fresh(n).await?;
                cacher.list_from_cache(&filter, "", limit)
            }
        }
    };
    if output == Output::Protobuf {
        convert_to_protobuf(&result.items).await;
    }
    Ok(list_response(req, result, output))
}

/// Unconverted items below which a protobuf page is converted where it is encoded: about
/// two milliseconds of work for pods, less than handing it to other threads is worth.
const PARALLEL_CONVERT_MIN: usize = 256;

/// Converts the items of a protobuf page that have no protobuf encoding yet (each object is
/// converted from its JSON once, on the first protobuf request that needs it), on blocking
/// threads, one run of items per core: a first list of 100,000 pods is about a second of
/// conversion, which would otherwise hold a runtime thread and use one core. Failures are
/// left for the encoding to report.
async fn convert_to_protobuf(items: &[std::sync::Arc<crate::cacher::CachedObject>]) {
    let todo: Vec<_> = items
        .iter()
        .filter(|o| o.derived.protobuf.get().is_none())
        .cloned()
        .collect();
    if todo.len() < PARALLEL_CONVERT_MIN {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runs = cores.min(todo.len() / (PARALLEL_CONVERT_MIN / 2)).max(1);
    let per_run = todo.len().div_ceil(runs);
    let tasks: Vec<_> = todo
        .chunks(per_run)
        .map(|run| {
            let run = run.to_vec();
            tokio::task::spawn_blocking(move || {
                for o in &run {
                    let _ = crate::encoding::protobuf_encode::cached_body(o);
                }
            })
        })
        .collect();
    for t in tasks {
        // A panicking conversion is converted again (and reported) by the encoding.
        let _ = t.await;
    }
}

/// Encodes a list page: the envelope is written here; the items are the cached bytes (or
/// their cached Table / PartialObjectMetadata renderings).
pub fn list_response(req: &RequestInfo, result: ListResult, output: Output) -> Response<Body> {
    let info = req.info;
    if output == Output::Protobuf {
        match crate::encoding::protobuf_encode::list_envelope(
            &info.api_version(),
            &info.list_kind(),
            result.resource_version,
            result.continue_token.as_deref(),
            result.remaining,
            &result.items,
        ) {
            Ok(envelope) => {
                let body = crate::encoding::protobuf_encode::list_body(envelope, result.items);
                let mut resp = Response::new(body);
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static(crate::encoding::protobuf::MEDIA_TYPE),
                );
                return resp;
            }
            Err(e) => tracing::warn!("answering JSON instead of protobuf: {}", e.message),
        }
    }
    let mut meta = serde_json::Map::new();
    meta.insert(
        "resourceVersion".into(),
        result.resource_version.to_string().into(),
    );
    if let Some(c) = &result.continue_token {
        meta.insert("continue".into(), c.clone().into());
    }
    if let Some(r) = result.remaining {
        meta.insert("remainingItemCount".into(), r.into());
    }
    let meta = serde_json::to_string(&meta).unwrap_or_else(|_| "{}".into());
    let body = match output {
        // (Protobuf only when its encoding failed above.)
        Output::Json | Output::Protobuf => {
            let header = format!(
                "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{meta},\"items\":[",
                info.list_kind(),
                info.api_version()
            );
            list_body(header.into(), result.items, "]}".into())
        }
        Output::Metadata { meta_version } => {
            let header = format!(
                "{{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/{meta_version}\",\"metadata\":{meta},\"items\":["
            );
            let encode = move |o: &crate::cacher::CachedObject, out: &mut bytes::BytesMut| {
                table::write_partial(o, meta_version, out)
            };
            list_body_with(header.into(), result.items, "]}".into(), Box::new(encode))
        }
        Output::Table {
            meta_version,
            include,
        } => {
            let header = format!(
                "{{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/{meta_version}\",\"metadata\":{meta},\"columnDefinitions\":{},\"rows\":[",
                table::column_definitions(info)
            );
            let now = api::time::unix_now();
            let encode = move |o: &crate::cacher::CachedObject, out: &mut bytes::BytesMut| {
                table::write_row(info, o, include, meta_version, now, out)
            };
            list_body_with(header.into(), result.items, "]}".into(), Box::new(encode))
        }
    };
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cacher::CachedObject;
    use std::sync::Arc;

    fn config_map(i: usize) -> Arc<CachedObject> {
        let info = crate::registry::resources::find("", "v1", "configmaps").unwrap();
        let json = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}"), "namespace": "default"},
            "data": {"i": i.to_string()}});
        Arc::new(
            CachedObject::decode(
                info,
                &format!("default/cm-{i}"),
                &serde_json::to_vec(&json).unwrap(),
                7,
            )
            .unwrap(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_protobuf_page_is_converted_ahead_and_a_small_one_is_left_alone() {
        let small: Vec<_> = (0..PARALLEL_CONVERT_MIN - 1).map(config_map).collect();
        convert_to_protobuf(&small).await;
        assert!(small.iter().all(|o| o.derived.protobuf.get().is_none()));

        let large: Vec<_> = (0..PARALLEL_CONVERT_MIN * 3).map(config_map).collect();
        convert_to_protobuf(&large).await;
        for o in &large {
            let converted = o.derived.protobuf.get().cloned().flatten();
            let expected = crate::encoding::protobuf_encode::encode_body(&o.json).unwrap();
            assert_eq!(converted.as_deref(), Some(&expected[..]), "{}", o.key);
        }
    }
}
