//! List decoding: a list response's `metadata` (resourceVersion, continue token,
//! remaining item count) and its items, typed or as zero-copy slices of the body.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::Error;
use super::watch_decoder::subslice;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireListMeta {
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
    #[serde(default)]
    remaining_item_count: Option<i64>,
}

#[derive(Deserialize)]
struct WireList<K> {
    #[serde(default)]
    metadata: Option<WireListMeta>,
    #[serde(default = "Option::default")]
    items: Option<Vec<K>>,
}

#[derive(Deserialize)]
struct WireRawList<'a> {
    #[serde(default)]
    metadata: Option<WireListMeta>,
    #[serde(default, borrow)]
    items: Option<Vec<&'a RawValue>>,
}

fn list_from<T>(meta: Option<WireListMeta>, items: Vec<T>) -> ObjectList<T> {
    let meta = meta.unwrap_or_default();
    ObjectList {
        items,
        resource_version: meta.resource_version.unwrap_or_default(),
        continue_token: meta.continue_.filter(|c| !c.is_empty()),
        remaining_item_count: meta.remaining_item_count,
    }
}

/// Decodes a list body with typed items.
pub(super) fn decode_list<K: DeserializeOwned>(
    body: &[u8],
    path: &str,
) -> Result<ObjectList<K>, Error> {
    let l: WireList<K> = serde_json::from_slice(body)
        .map_err(|e| Error::decode(format!("the list from {path}"), e))?;
    Ok(list_from(l.metadata, l.items.unwrap_or_default()))
}

/// Decodes a list body with each item as a zero-copy slice of `body`.
pub(crate) fn decode_raw_list(body: &Bytes, path: &str) -> Result<ObjectList<Bytes>, Error> {
    let l: WireRawList<'_> = serde_json::from_slice(body)
        .map_err(|e| Error::decode(format!("the list from {path}"), e))?;
    let items = l
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|raw| subslice(body, raw.get().as_bytes()))
        .collect();
    Ok(list_from(l.metadata, items))
}

/// One page of a list (or a whole list from `list_all`).
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectList<T> {
    /// The items, in the server's order (by namespace and name).
    pub items: Vec<T>,
    /// `metadata.resourceVersion`: the version the list was served at. Watch from here to
    /// see every later change.
    pub resource_version: String,
    /// `metadata.continue`: pass to
    /// [`ListParams::continue_token`](super::ListParams::continue_token) for the next
    /// page; `None` on the last page.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`: how many items follow this page, when the server
    /// knows.
    pub remaining_item_count: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_lists_are_slices_of_the_body() {
        let body = Bytes::from_static(
            br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9","continue":"tok","remainingItemCount":3},"items":[{"metadata":{"name":"a"}}, {"metadata":{"name":"b\"q"}}]}"#,
        );
        let l = decode_raw_list(&body, "/x").unwrap();
        assert_eq!(l.resource_version, "9");
        assert_eq!(l.continue_token.as_deref(), Some("tok"));
        assert_eq!(l.remaining_item_count, Some(3));
        assert_eq!(l.items.len(), 2);
        assert_eq!(&l.items[1][..], br#"{"metadata":{"name":"b\"q"}}"#);
        let base = body.as_ptr() as usize;
        let p = l.items[0].as_ptr() as usize;
        assert!(p > base && p < base + body.len());

        let empty = decode_raw_list(
            &Bytes::from_static(br#"{"metadata":{"continue":""},"items":null}"#),
            "/x",
        )
        .unwrap();
        assert!(empty.items.is_empty() && empty.continue_token.is_none());
        assert!(matches!(
            decode_raw_list(&Bytes::from_static(b"[1]"), "/x"),
            Err(Error::Decode { .. })
        ));
    }

    #[test]
    fn typed_lists() {
        let body = br#"{"metadata":{"resourceVersion":"3"},"items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}]}"#;
        let l: ObjectList<k8s_openapi::api::core::v1::Pod> = decode_list(body, "/x").unwrap();
        assert_eq!(l.items[0].metadata.name.as_deref(), Some("p"));
        assert_eq!(l.resource_version, "3");
    }
}
