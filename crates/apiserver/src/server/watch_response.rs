//! The HTTP response of a watch: the registration the watch handler got from the cacher,
//! streamed as a [`WatchBody`] in the negotiated encoding, on the transport the request came
//! over — which the dispatcher may write to directly. It assumes the connection layer
//! attached a direct-write handle only where such writes are sound.

use super::direct_conn::DirectConn;
use super::http2::writer::StreamSink;
use super::watch_body::WatchBody;
use crate::cacher::outbox::Outbox;
use crate::cacher::WatchRegistration;
use crate::encoding::body::Body;
use crate::encoding::negotiate::Output;
use crate::encoding::table::{MetadataEncoder, TableEncoder};
use crate::registry::ResourceInfo;
use http::{HeaderValue, Response};
use http_body_util::BodyExt;
use std::sync::{Arc, OnceLock};

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
    Http2(StreamSink),
}

/// The response streaming `reg`, a watch of `info`'s resource whose event objects are rendered
/// as `output` (Tables of one row, PartialObjectMetadata, or the objects). `direct` is the
/// transport the response goes out on, if the cacher may write to it.
///
/// `conn` is the HTTP/1.1 connection the response goes out on, if known: it is reset when
/// the watcher is terminated for not keeping up and its client then reads nothing more.
pub fn watch_response(
    reg: WatchRegistration,
    info: &'static ResourceInfo,
    output: Output,
    direct: Option<DirectWatch>,
    conn: Option<Arc<DirectConn>>,
) -> Response<Body> {
    let mut body = WatchBody::from_registration(reg);
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
                info,
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
    resp
}
