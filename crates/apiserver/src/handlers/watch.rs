//! WATCH: a long response streaming one JSON event per line from the watch cache.

use super::state::ApiServer;
use super::{build_filter, RequestInfo};
use crate::cacher::cacher::WatchStart;
use crate::cacher::outbox::Outbox;
use crate::cacher::DirectConn;
use crate::encoding::body::Body;
use crate::encoding::negotiate::Output;
use crate::encoding::table::{MetadataEncoder, TableEncoder};
use api::list_options::{ListOptions, ResourceVersion};
use api::Status;
use http::{HeaderValue, Response};
use http_body_util::BodyExt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The longest watch a `timeoutSeconds` can ask for.
const MAX_WATCH_TIMEOUT_SECONDS: u64 = 365 * 24 * 3600;

/// Without `timeoutSeconds`, a watch lasts a random 30–60 minutes (as kube-apiserver's
/// `--min-request-timeout` spreading does), so reconnections do not synchronize.
fn default_timeout() -> Duration {
    let jitter = uuid::Uuid::new_v4().as_u128() % 1800;
    Duration::from_secs(1800 + jitter as u64)
}

/// The connection a watch response goes out on, when the cacher may write to it directly,
/// and how.
#[derive(Debug)]
pub enum DirectWatch {
    /// A chunked HTTP/1.1 response.
    Chunked(Arc<DirectConn>),
    /// A WebSocket after the upgrade; the slot receives the queue the pump sends its control
    /// frames through.
    WebSocket(Arc<DirectConn>, Arc<OnceLock<Arc<Outbox>>>),
    /// An HTTP/2 stream served by our own HTTP/2 connection, whose writer the dispatcher may
    /// append DATA frames to.
    Http2(crate::server::http2::writer::StreamSink),
}

/// Handles a watch request (`?watch=true` or the legacy `/watch/` path); event objects are
/// rendered as `output` (Tables of one row, PartialObjectMetadata, or the objects). `direct` is
/// the plain HTTP/1.1 connection the response goes out on, if the cacher may write to it.
///
/// `conn` is the HTTP/1.1 connection the response goes out on, if known: it is reset when
/// the watcher is terminated for not keeping up and its client then reads nothing more.
pub async fn watch(
    srv: &ApiServer,
    req: &RequestInfo,
    opts: &ListOptions,
    output: Output,
    direct: Option<DirectWatch>,
    conn: Option<Arc<DirectConn>>,
) -> Result<Response<Body>, Status> {
    let cacher = srv.cacher(req.info)?;
    let mut filter = build_filter(req, opts)?;
    if let Some(name) = &req.name {
        // Legacy `/watch/namespaces/{ns}/{resource}/{name}`: a watch of one object.
        let sel = format!("metadata.name={}", api::fields::escape_value(name));
        let extra = api::fields::FieldSelector::parse(&sel)
            .map_err(|e| Status::bad_request(e.to_string()))?;
        if !filter.fields.is_empty() {
            return Err(Status::bad_request(
                "a field selector cannot be combined with a named watch",
            ));
        }
        filter.fields = extra;
    }
    let start = match (opts.send_initial_events, opts.resource_version) {
        (Some(true), ResourceVersion::AtLeast(n)) => WatchStart::InitialEvents(n),
        (Some(true), ResourceVersion::Any) => WatchStart::InitialEvents(0),
        (Some(true), ResourceVersion::Unset) => {
            WatchStart::InitialEvents(cacher_consistent_rv(srv, req).await?)
        }
        (Some(false), ResourceVersion::Unset | ResourceVersion::Any) => {
            WatchStart::After(cacher.resource_version())
        }
        (_, ResourceVersion::Unset) => WatchStart::CurrentState { consistent: true },
        (_, ResourceVersion::Any) => WatchStart::CurrentState { consistent: false },
        (_, ResourceVersion::AtLeast(n)) => WatchStart::After(n),
    };
    // 0 is "the server picks", as in kube-apiserver; beyond a year is a year (a deadline
    // past what `Instant` can hold would otherwise panic).
    let timeout = match opts.timeout_seconds {
        None | Some(0) => default_timeout(),
        Some(s) => Duration::from_secs(s.min(MAX_WATCH_TIMEOUT_SECONDS)),
    };
    let deadline = Instant::now() + timeout;
    let mut body = cacher
        .watch(filter, start, opts.allow_watch_bookmarks, deadline)
        .await?;
    if let Some(conn) = conn {
        body = body.with_connection(conn);
    }
    match output {
        Output::Json => match direct {
            Some(DirectWatch::Chunked(conn)) => body = body.with_direct_conn(conn),
            Some(DirectWatch::WebSocket(conn, slot)) => {
                let (b, control) = body.with_direct_websocket(conn);
                body = b;
                if let Some(c) = control {
                    let _ = slot.set(c);
                }
            }
            Some(DirectWatch::Http2(sink)) => body = body.with_direct_http2(sink),
            None => {}
        },
        Output::Table {
            meta_version,
            include,
        } => {
            body = body.with_encoder(std::sync::Arc::new(TableEncoder {
                info: req.info,
                include,
                meta_version,
            }))
        }
        Output::Metadata { meta_version } => {
            body = body.with_encoder(std::sync::Arc::new(MetadataEncoder { meta_version }))
        }
        Output::Protobuf => body = body.with_protobuf_frames(),
    }
    let content_type = if output == Output::Protobuf {
        crate::encoding::protobuf_encode::WATCH_MEDIA_TYPE
    } else {
        "application/json"
    };
    let mut resp = Response::new(body.boxed_unsync());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

async fn cacher_consistent_rv(srv: &ApiServer, req: &RequestInfo) -> Result<u64, Status> {
    srv.cacher(req.info)?.wait_consistent().await
}
