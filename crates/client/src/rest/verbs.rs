//! The verbs of the Kubernetes API on a [`Client`] — list, watch, get, create, replace,
//! patch, delete — for any [`ApiResource`].
//!
//! Objects are generic: anything `serde` can decode (typed `k8s-openapi` objects,
//! `serde_json::Value`, your own structs), or raw JSON bytes through the `*_raw` methods,
//! which hand out each list item and watch object as a zero-copy [`Bytes`] slice of the
//! response without building a JSON tree. The transport under them is in
//! [`super::transport`]; [`super::Api`] fixes the resource and namespace.

use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::Method;
use http_body_util::BodyExt as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::delete_outcome::{DeleteOutcome, SuccessStatus};
use super::error::{BoxError, Error};
use super::object_list::{decode_list, decode_raw_list, ObjectList};
use super::params::{
    DeleteParams, ListParams, PatchParams, PatchType, PostParams, WatchParams, DEFAULT_PAGE_SIZE,
};
use super::protobuf_decoder::{
    decode_protobuf_list, ACCEPT_PROTOBUF, MEDIA_TYPE as PROTOBUF_MEDIA_TYPE,
};
use super::resource::ApiResource;
use super::transport::{error_of, not_protobuf, Client};
use super::watch_decoder::{cache_object, raw_object, typed_object, DEFAULT_MAX_LINE};
use super::watch_stream::{EventDecoder, WatchStream};
use crate::object::DecodeObject;
use crate::object_interner::{Scope, Version};

impl Client {
    /// One page of a list (see [`ListParams`]), decoding each item as `K`.
    ///
    /// # Errors
    /// The server's error (e.g. 410 for an expired continue token), transport or decode
    /// errors.
    pub async fn list<K: DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<K>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let (_, body) = self.request_bytes(Method::GET, &path, None).await?;
        decode_list(&body, &path)
    }

    /// One page of a list with each item as the raw JSON bytes of the object: zero-copy
    /// slices of the response body, no JSON tree is built.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn list_raw(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<Bytes>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let (_, body) = self.request_bytes(Method::GET, &path, None).await?;
        decode_raw_list(&body, &path)
    }

    /// One page of a list in Kubernetes' protobuf encoding, each item the raw protobuf
    /// message of the object (a zero-copy slice of the response body; decode it with
    /// [`crate::protobuf_object::ProtobufObject`] or a generated type). Only built-in kinds
    /// have a protobuf encoding: for any other the server answers JSON, which is an error
    /// here.
    ///
    /// # Errors
    /// As [`list`](Self::list); a decode error if the answer is not a protobuf list.
    pub async fn list_protobuf(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<Bytes>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let (_, body) = self
            .request_accepting(Method::GET, &path, None, ACCEPT_PROTOBUF)
            .await?;
        if !body.starts_with(crate::protobuf_wire::MAGIC) {
            return Err(not_protobuf(&format!("GET {path}")));
        }
        decode_protobuf_list(&body, &path)
    }

    /// One page of a list, cut into items while the response arrives: `on_item` gets each
    /// item's raw JSON text (borrowed for the call) in order, as soon as it is complete, so
    /// neither the whole body nor all raw items are ever held at once. The result carries
    /// the list's metadata and no items. Items are not validated here: decode them with a
    /// validating decoder. An error from `on_item` ends the request with that error.
    ///
    /// # Errors
    /// As [`list`](Self::list), plus a decode error for a body that is not a list object.
    pub async fn list_raw_streaming(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
        mut on_item: impl FnMut(&[u8]) -> Result<(), Error> + Send,
    ) -> Result<ObjectList<Bytes>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let split_error = |e: super::list_splitter::SplitError| {
            Error::decode(
                format!("the list from {path}"),
                <serde_json::Error as serde::de::Error>::custom(e),
            )
        };
        let mut splitter = super::list_splitter::ListSplitter::new(DEFAULT_MAX_LINE);
        self.get_chunks(&path, "application/json", |data| {
            split_chunk(|emit| splitter.push(data, emit), &mut on_item, split_error)
        })
        .await?;
        let skeleton = Bytes::from(splitter.finish().map_err(split_error)?);
        decode_raw_list(&skeleton, &path)
    }

    /// [`list_raw_streaming`](Self::list_raw_streaming) in Kubernetes' protobuf encoding:
    /// `on_item` gets each item's own protobuf message (borrowed for the call) in order, as
    /// soon as its last byte has arrived, so the whole body is never held at once. The result
    /// carries the list's metadata and no items. Only built-in kinds have a protobuf
    /// encoding: for any other the server answers JSON, which is an error here.
    ///
    /// # Errors
    /// As [`list_protobuf`](Self::list_protobuf); an error from `on_item` ends the request
    /// with that error.
    pub async fn list_protobuf_streaming(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
        mut on_item: impl FnMut(&[u8]) -> Result<(), Error> + Send,
    ) -> Result<ObjectList<Bytes>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let context = format!("the protobuf list from {path}");
        let wire = |e| super::protobuf_decoder::wire(&context, e);
        let mut splitter =
            super::protobuf_list_splitter::ProtobufListSplitter::new(DEFAULT_MAX_LINE);
        self.get_chunks(&path, ACCEPT_PROTOBUF, |data| {
            // A kind without a protobuf encoding is answered in JSON.
            let magic = crate::protobuf_wire::MAGIC.first();
            if splitter.at_start() && data.first().is_some_and(|b| Some(b) != magic) {
                return Err(not_protobuf(&format!("GET {path}")));
            }
            split_chunk(|emit| splitter.push(data, emit), &mut on_item, wire)
        })
        .await?;
        splitter.finish().map_err(wire)
    }

    /// The whole list, following continue tokens with pages of `params.limit` items
    /// ([`DEFAULT_PAGE_SIZE`] when unset). All pages are served at the resourceVersion of
    /// the first, which the result carries. If a continue token expires mid-way (410), the
    /// list is retried once in full without paging, as client-go's pager does.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn list_all<K: DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<K>, Error> {
        self.paginate(params, |p| async move {
            self.list(resource, namespace, &p).await
        })
        .await
    }

    /// [`list_all`](Self::list_all) with raw items, as [`list_raw`](Self::list_raw).
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn list_all_raw(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<Bytes>, Error> {
        self.paginate(params, |p| async move {
            self.list_raw(resource, namespace, &p).await
        })
        .await
    }

    async fn paginate<T, F, Fut>(
        &self,
        params: &ListParams,
        page: F,
    ) -> Result<ObjectList<T>, Error>
    where
        F: Fn(ListParams) -> Fut,
        Fut: std::future::Future<Output = Result<ObjectList<T>, Error>>,
    {
        let mut p = params.clone();
        if p.limit.is_none() {
            p.limit = Some(DEFAULT_PAGE_SIZE);
        }
        let mut all = page(p.clone()).await?;
        let mut tokens = std::collections::HashSet::new();
        while let Some(token) = all.continue_token.take() {
            // A server that hands out a token it already gave would page forever.
            if !tokens.insert(token.clone()) {
                return Err(Error::UnexpectedResponse {
                    code: 200,
                    body: format!("the server repeated continue token {token:?} within one list"),
                });
            }
            let mut next = p.clone();
            next.continue_token = Some(token);
            // The continue token pins the version; the server refuses both together.
            next.resource_version = None;
            next.resource_version_match = None;
            match page(next).await {
                Ok(more) => {
                    all.items.extend(more.items);
                    all.continue_token = more.continue_token;
                    all.remaining_item_count = more.remaining_item_count;
                }
                Err(e) if e.is_gone() => {
                    let mut full = params.clone();
                    full.limit = None;
                    full.continue_token = None;
                    return page(full).await;
                }
                Err(e) => return Err(e),
            }
        }
        all.remaining_item_count = None;
        Ok(all)
    }

    /// Starts a watch, decoding each object as `K`. Fails fast if the server refuses the
    /// watch with an HTTP error; a too-old resourceVersion arrives instead as an
    /// [`WatchEvent::Error`](super::WatchEvent::Error) with code 410 on the stream.
    ///
    /// # Errors
    /// The server's error for the watch request, or a transport error.
    pub async fn watch<K: DeserializeOwned + Send + 'static>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> Result<WatchStream<K>, Error> {
        self.start_watch(
            resource,
            namespace,
            params,
            EventDecoder::Json(typed_object::<K>),
        )
        .await
    }

    /// Starts a watch whose objects are the raw JSON bytes of each event's object, sliced
    /// from the received chunk without copying when the event lies within one chunk.
    ///
    /// # Errors
    /// As [`watch`](Self::watch).
    pub async fn watch_raw(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> Result<WatchStream<Bytes>, Error> {
        self.start_watch(resource, namespace, params, EventDecoder::Json(raw_object))
            .await
    }

    /// Starts a watch whose objects are decoded with [`DecodeObject::decode_at`] while the
    /// event line is validated — for a [`crate::object::DynamicObject`], the object is read
    /// in the same single pass over the line. What [`crate::cache::RestListerWatcher`] uses.
    ///
    /// Each object comes already shared (an `Arc`, as the caches keep it): for a run of
    /// events decoded on a decode thread, the `Arc` is made there too, off the task that
    /// reads the stream.
    ///
    /// # Errors
    /// As [`watch`](Self::watch).
    ///
    /// For a type read from protobuf ([`DecodeObject::PROTOBUF`]) the watch is asked for in
    /// protobuf and each object is decoded with [`DecodeObject::decode_protobuf`]; a server
    /// that answers in JSON (a kind without a protobuf encoding) is an error.
    pub async fn watch_objects<K: DecodeObject>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> Result<WatchStream<Arc<K>>, Error> {
        self.watch_objects_trimmed(resource, namespace, params, false)
            .await
    }

    /// [`Client::watch_objects`]; with `strip_managed_fields`, JSON objects are decoded
    /// without `metadata.managedFields` ([`crate::managed_fields_trim`]).
    ///
    /// # Errors
    /// As [`watch`](Self::watch).
    pub async fn watch_objects_trimmed<K: DecodeObject>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        strip_managed_fields: bool,
    ) -> Result<WatchStream<Arc<K>>, Error> {
        if K::PROTOBUF {
            return self
                .start_watch(
                    resource,
                    namespace,
                    params,
                    EventDecoder::Protobuf(shared_protobuf_object::<K>),
                )
                .await;
        }
        let decode = match (strip_managed_fields, self.inner.shared_objects) {
            (true, Some(server)) => EventDecoder::JsonShared(
                interned_trimmed_object::<K>,
                Scope::new(server, &resource.collection_path(None), true),
            ),
            (true, None) => EventDecoder::Json(shared_trimmed_object::<K>),
            (false, _) => EventDecoder::Json(shared_cache_object::<K>),
        };
        self.start_watch(resource, namespace, params, decode).await
    }

    async fn start_watch<T: Send + 'static>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        decode: EventDecoder<T>,
    ) -> Result<WatchStream<T>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let accept = match decode {
            EventDecoder::Json(_) | EventDecoder::JsonShared(..) => "application/json",
            EventDecoder::Protobuf(_) => ACCEPT_PROTOBUF,
        };
        let send = self.send(Method::GET, &path, None, accept);
        // The timeout bounds the wait for the response head only: the stream is long-lived.
        let resp = match self.inner.timeout {
            Some(d) => tokio::time::timeout(d, send)
                .await
                .map_err(|_| Error::Timeout(d))??,
            None => send.await?,
        };
        let status = resp.status();
        if !status.is_success() {
            return Err(error_of(resp, &format!("GET {path}")).await);
        }
        let answered_protobuf = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with(PROTOBUF_MEDIA_TYPE));
        let body = resp
            .into_body()
            .map_err(|e| -> BoxError { Box::new(e) })
            .boxed_unsync();
        if matches!(decode, EventDecoder::Protobuf(_)) && !answered_protobuf {
            return Err(not_protobuf(&format!("GET {path}")));
        }
        Ok(WatchStream::with_decoder(
            body,
            decode,
            params.idle_timeout,
            params.max_line.unwrap_or(DEFAULT_MAX_LINE),
            format!("GET {path}"),
        ))
    }

    /// Reads one object.
    ///
    /// # Errors
    /// 404 NotFound as [`Error::Api`], transport or decode errors.
    pub async fn get<K: DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<K, Error> {
        let path = item_path(resource, namespace, name)?;
        let (_, body) = self.request_bytes(Method::GET, &path, None).await?;
        decode_object(&body, &path)
    }

    /// Creates an object (POST to the collection) and returns it as stored.
    ///
    /// # Errors
    /// 409 AlreadyExists, 422 Invalid, ... as [`Error::Api`]; transport or decode errors.
    pub async fn create<K: Serialize + DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &PostParams,
        object: &K,
    ) -> Result<K, Error> {
        let (path, body) = self.post(resource, namespace, params, object).await?;
        decode_object(&body, &path)
    }

    /// [`Client::create`] for a caller that does not need the object back (an event
    /// recorder): the server's answer is received but not decoded.
    ///
    /// # Errors
    /// As [`Client::create`], but for decode errors.
    pub async fn create_unread<K: Serialize>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &PostParams,
        object: &K,
    ) -> Result<(), Error> {
        self.post(resource, namespace, params, object)
            .await
            .map(drop)
    }

    /// POSTs `object` to the collection; returns the path and the answer's body.
    async fn post<K: Serialize>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &PostParams,
        object: &K,
    ) -> Result<(String, Bytes), Error> {
        if resource.namespaced && namespace.is_none_or(str::is_empty) {
            return Err(Error::InvalidRequest(format!(
                "creating {} needs a namespace",
                resource.plural
            )));
        }
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let body = encode(object)?;
        let (_, body) = self
            .request_bytes(Method::POST, &path, Some((body, "application/json")))
            .await?;
        Ok((path, body))
    }

    /// Replaces an object (PUT). A `metadata.resourceVersion` in `object` makes the update
    /// conditional: 409 Conflict if it is stale.
    ///
    /// # Errors
    /// 409 Conflict, 404 NotFound, 422 Invalid, ... as [`Error::Api`]; transport or decode
    /// errors.
    pub async fn replace<K: Serialize + DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &PostParams,
        object: &K,
    ) -> Result<K, Error> {
        let path = with_query(item_path(resource, namespace, name)?, &params.to_query());
        let body = encode(object)?;
        let (_, body) = self
            .request_bytes(Method::PUT, &path, Some((body, "application/json")))
            .await?;
        decode_object(&body, &path)
    }

    /// Patches an object with `patch` in the format `patch_type` names, and returns the
    /// result.
    ///
    /// # Errors
    /// 404 NotFound, 409 Conflict, 422 Invalid, 415, ... as [`Error::Api`]; transport or
    /// decode errors.
    pub async fn patch<K: DeserializeOwned, P: Serialize + ?Sized>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &PatchParams,
        patch_type: PatchType,
        patch: &P,
    ) -> Result<K, Error> {
        let path = with_query(item_path(resource, namespace, name)?, &params.to_query());
        let body = encode(patch)?;
        let (_, body) = self
            .request_bytes(
                Method::PATCH,
                &path,
                Some((body, patch_type.content_type())),
            )
            .await?;
        decode_object(&body, &path)
    }

    /// Deletes an object. The server answers with the object (possibly still present with
    /// a `deletionTimestamp`, when finalizers or a grace period apply) or with a success
    /// Status; both are returned as [`DeleteOutcome`].
    ///
    /// # Errors
    /// 404 NotFound, 409 Conflict (failed precondition), ... as [`Error::Api`]; transport or
    /// decode errors.
    pub async fn delete<K: DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<K>, Error> {
        let path = with_query(
            item_path(resource, namespace, name)?,
            &params.dry_run_query(),
        );
        let body = params.body()?;
        let (_, body) = self
            .request_bytes(Method::DELETE, &path, Some((body, "application/json")))
            .await?;
        #[derive(Deserialize)]
        struct KindProbe {
            #[serde(default)]
            kind: Option<String>,
        }
        let probe: KindProbe = serde_json::from_slice(&body)
            .map_err(|e| Error::decode(format!("the response of DELETE {path}"), e))?;
        if probe.kind.as_deref() == Some("Status") {
            let s: SuccessStatus = serde_json::from_slice(&body)
                .map_err(|e| Error::decode(format!("the Status of DELETE {path}"), e))?;
            return Ok(DeleteOutcome::Status(s));
        }
        decode_object(&body, &path).map(DeleteOutcome::Object)
    }
}

fn with_query(mut path: String, query: &str) -> String {
    if !query.is_empty() {
        path.push('?');
        path.push_str(query);
    }
    path
}

fn item_path(resource: &ApiResource, namespace: Option<&str>, name: &str) -> Result<String, Error> {
    if name.is_empty() {
        return Err(Error::InvalidRequest(format!(
            "an object of {} needs a name",
            resource.plural
        )));
    }
    if resource.namespaced && namespace.is_none_or(str::is_empty) {
        return Err(Error::InvalidRequest(format!(
            "{} {name:?} needs a namespace",
            resource.plural
        )));
    }
    Ok(resource.item_path(namespace, name))
}

pub(super) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, Error> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| Error::decode("the request body (encoding)", e))
}

fn decode_object<K: DeserializeOwned>(body: &[u8], path: &str) -> Result<K, Error> {
    serde_json::from_slice(body).map_err(|e| Error::decode(format!("the response of {path}"), e))
}

/// Feeds one received chunk to a list splitter (`push`, given the item callback) and hands
/// each whole item to `on_item`, in order, until `on_item` fails; items after that are
/// passed over. The splitter's error (mapped by `split_error`) comes first, then the first
/// error of `on_item`.
fn split_chunk<E>(
    push: impl FnOnce(&mut dyn FnMut(&[u8])) -> Result<(), E>,
    on_item: &mut impl FnMut(&[u8]) -> Result<(), Error>,
    split_error: impl FnOnce(E) -> Error,
) -> Result<(), Error> {
    let mut failed = None;
    push(&mut |item| {
        if failed.is_none() {
            failed = on_item(item).err();
        }
    })
    .map_err(split_error)?;
    failed.map_or(Ok(()), Err)
}

/// [`DecodeObject::decode_protobuf`], shared: the decode function of
/// [`Client::watch_objects`] for protobuf.
fn shared_protobuf_object<K: DecodeObject>(
    message: &[u8],
) -> Result<Arc<K>, crate::object::ObjectError> {
    K::decode_protobuf(message).map(Arc::new)
}

/// [`cache_object`], shared: the decode function of [`Client::watch_objects`] for JSON.
fn shared_cache_object<K: DecodeObject>(
    line: &Bytes,
    v: &mut crate::json_validate::Validator<'_>,
) -> Result<Arc<K>, serde_json::Error> {
    cache_object::<K>(line, v).map(Arc::new)
}

/// [`shared_cache_object`] without `metadata.managedFields`: the object's text is
/// validated in the line pass, then decoded with the member cut out.
fn shared_trimmed_object<K: DecodeObject>(
    _line: &Bytes,
    v: &mut crate::json_validate::Validator<'_>,
) -> Result<Arc<K>, serde_json::Error> {
    let (start, end) = v
        .value()
        .map_err(<serde_json::Error as serde::de::Error>::custom)?;
    let text = v.text().get(start..end).unwrap_or_default();
    crate::managed_fields_trim::decode_well_formed_trimmed::<K>(text)
        .map(Arc::new)
        .map_err(<serde_json::Error as serde::de::Error>::custom)
}

/// [`shared_trimmed_object`] for a stream whose objects are shared in `scope`
/// ([`crate::object_interner`]): an object version another stream of the scope already
/// decoded is taken from it.
///
/// Only in-process clients share objects, and their server is this process's own, whose
/// JSON encoder writes well-formed text: an object's extent is found by its braces and
/// strings instead of by validating it, and its text is checked only by decoding it, when no
/// other stream has. A version is taken from another stream only for the same text, which
/// decoded there; anything else is validated as ever.
fn interned_trimmed_object<K: DecodeObject>(
    _line: &Bytes,
    v: &mut crate::json_validate::Validator<'_>,
    scope: Scope,
) -> Result<Arc<K>, serde_json::Error> {
    fn custom(e: impl std::fmt::Display) -> serde_json::Error {
        <serde_json::Error as serde::de::Error>::custom(e)
    }
    let (start, end) = match v.skip_trusted_object() {
        Some(span) => span,
        None => v.value().map_err(custom)?,
    };
    let text = v.text().get(start..end).unwrap_or_default();
    let scan = crate::managed_fields_trim::scan_metadata(text, true).map_err(custom)?;
    let version = Version::of(text, scan.uid, scan.resource_version);
    if let Some(version) = &version {
        if let Some(shared) = crate::object_interner::get::<K>(scope, version) {
            return Ok(shared);
        }
    }
    let object = crate::managed_fields_trim::decode_well_formed_cut::<K>(text, scan.managed_fields)
        .map(Arc::new)
        .map_err(custom)?;
    if let Some(version) = &version {
        crate::object_interner::insert(scope, version, &object);
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk's items go to `on_item` in order until it fails; its first error is
    /// returned, and the splitter's own error comes before it.
    #[test]
    fn split_chunk_stops_handing_out_items_at_the_first_error() {
        fn secs(n: u64) -> Error {
            Error::Timeout(std::time::Duration::from_secs(n))
        }
        let push = |fail: bool| {
            move |emit: &mut dyn FnMut(&[u8])| {
                for item in [&b"a"[..], b"b", b"c", b"d"] {
                    emit(item);
                }
                if fail {
                    Err(9)
                } else {
                    Ok(())
                }
            }
        };
        let mut seen = Vec::new();
        let mut on_item = |item: &[u8]| {
            seen.push(item.to_vec());
            match item {
                b"b" => Err(secs(1)),
                b"c" => Err(secs(2)),
                _ => Ok(()),
            }
        };
        let got = split_chunk(push(false), &mut on_item, secs);
        assert!(
            matches!(got, Err(Error::Timeout(d)) if d.as_secs() == 1),
            "{got:?}"
        );
        assert_eq!(seen, [b"a".to_vec(), b"b".to_vec()]);
        let got = split_chunk(push(true), &mut |_: &[u8]| Err(secs(1)), secs);
        assert!(
            matches!(got, Err(Error::Timeout(d)) if d.as_secs() == 9),
            "{got:?}"
        );
        assert!(split_chunk(push(false), &mut |_: &[u8]| Ok(()), secs).is_ok());
    }
}
