//! Content negotiation: which rendering of objects a request's `Accept` header asks for.
//!
//! Supported: plain JSON (`application/json`, `application/*`, `*/*`), and with
//! `g=meta.k8s.io;v=v1|v1beta1` the `as=Table`, `as=PartialObjectMetadata` (get, watch) and
//! `as=PartialObjectMetadataList` (list, watch) renderings. Media ranges are weighed by their
//! `q` value (ties: first listed wins); `q=0` excludes one. A header nothing can satisfy is
//! 406 NotAcceptable; a missing or empty header means JSON.

use super::table::IncludeObject;
use api::Status;

/// How objects are rendered in a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The objects themselves.
    Json,
    /// A `meta.k8s.io` Table.
    Table {
        /// `v1` or `v1beta1`.
        meta_version: &'static str,
        /// What rows carry in `object`.
        include: IncludeObject,
    },
    /// PartialObjectMetadata (or a PartialObjectMetadataList for lists).
    Metadata {
        /// `v1` or `v1beta1`.
        meta_version: &'static str,
    },
    /// The objects in Kubernetes' protobuf encoding (length-delimited frames for watches).
    Protobuf,
}

/// What kind of request is being answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A single object (GET of a name).
    Object,
    /// A list.
    List,
    /// A watch stream.
    Watch,
}

/// One media range of an Accept header.
#[derive(Debug, Clone, PartialEq)]
struct MediaRange<'a> {
    mime: String,
    params: Vec<(String, &'a str)>,
    q: f32,
}

fn parse_range(text: &str) -> Option<MediaRange<'_>> {
    let mut parts = text.split(';');
    let mime = parts.next()?.trim().to_ascii_lowercase();
    let (ty, sub) = mime.split_once('/')?;
    if ty.is_empty() || sub.is_empty() {
        return None;
    }
    let mut params = Vec::new();
    let mut q = 1.0f32;
    for p in parts {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        let (k, v) = p.split_once('=')?;
        let k = k.trim().to_ascii_lowercase();
        let v = v.trim().trim_matches('"');
        if k == "q" {
            q = v.parse().ok().filter(|q: &f32| (0.0..=1.0).contains(q))?;
        } else {
            params.push((k, v));
        }
    }
    Some(MediaRange { mime, params, q })
}

fn meta_version(v: &str) -> Option<&'static str> {
    match v {
        "v1" => Some("v1"),
        "v1beta1" => Some("v1beta1"),
        _ => None,
    }
}

fn output_for(
    range: &MediaRange<'_>,
    target: Target,
    include: IncludeObject,
    protobuf: bool,
) -> Option<Output> {
    if range.mime == super::protobuf::MEDIA_TYPE {
        // `stream=watch` may accompany it; a Table or metadata rendering in protobuf is not
        // offered.
        let plain = range.params.iter().all(|(k, _)| k == "stream");
        return (protobuf && plain).then_some(Output::Protobuf);
    }
    if !matches!(
        range.mime.as_str(),
        "application/json" | "application/*" | "*/*"
    ) {
        return None;
    }
    let param = |k: &str| range.params.iter().find(|(pk, _)| pk == k).map(|(_, v)| *v);
    let Some(as_kind) = param("as") else {
        return Some(Output::Json);
    };
    if param("g") != Some("meta.k8s.io") {
        return None;
    }
    let meta_version = meta_version(param("v")?)?;
    match (as_kind, target) {
        ("Table", _) => Some(Output::Table {
            meta_version,
            include,
        }),
        ("PartialObjectMetadata", Target::Object | Target::Watch)
        | ("PartialObjectMetadataList", Target::List | Target::Watch) => {
            Some(Output::Metadata { meta_version })
        }
        _ => None,
    }
}

/// Chooses the rendering for `accept` (the raw header, if any); `protobuf` says whether the
/// resource can be served as protobuf.
pub fn negotiate(
    accept: Option<&str>,
    target: Target,
    include: IncludeObject,
    protobuf: bool,
) -> Result<Output, Status> {
    let Some(header) = accept.map(str::trim).filter(|a| !a.is_empty()) else {
        return Ok(Output::Json);
    };
    let mut best: Option<(f32, Output)> = None;
    for text in header.split(',') {
        let Some(range) = parse_range(text) else {
            continue;
        };
        if range.q <= 0.0 {
            continue;
        }
        let Some(out) = output_for(&range, target, include, protobuf) else {
            continue;
        };
        if best.is_none_or(|(q, _)| range.q > q) {
            best = Some((range.q, out));
        }
    }
    best.map(|(_, o)| o)
        .ok_or_else(|| Status::not_acceptable(header))
}

/// Reads `includeObject` from a query string (400 for an unknown value).
pub fn include_object(query: &str) -> Result<IncludeObject, Status> {
    match form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "includeObject") {
        None => Ok(IncludeObject::Metadata),
        Some((_, v)) => IncludeObject::parse(&v).ok_or_else(|| {
            Status::bad_request(format!(
                "includeObject: unsupported value {v:?} (want None, Metadata or Object)"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECTL: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

    fn n(accept: &str, t: Target) -> Result<Output, Status> {
        negotiate(Some(accept), t, IncludeObject::Metadata, false)
    }

    #[test]
    fn protobuf_only_where_the_resource_supports_it() {
        let pb = |a: &str, t, ok| negotiate(Some(a), t, IncludeObject::Metadata, ok);
        let client_go = "application/vnd.kubernetes.protobuf, application/json";
        for t in [Target::Object, Target::List, Target::Watch] {
            assert_eq!(pb(client_go, t, true).unwrap(), Output::Protobuf);
            assert_eq!(pb(client_go, t, false).unwrap(), Output::Json);
        }
        assert_eq!(
            pb(
                "application/vnd.kubernetes.protobuf;stream=watch",
                Target::Watch,
                true
            )
            .unwrap(),
            Output::Protobuf
        );
        assert_eq!(
            pb("application/vnd.kubernetes.protobuf", Target::List, false)
                .unwrap_err()
                .code(),
            406
        );
        assert_eq!(
            pb(
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
                Target::List,
                true
            )
            .unwrap_err()
            .code(),
            406
        );
    }

    #[test]
    fn kubectl_gets_a_table() {
        let want = Output::Table {
            meta_version: "v1",
            include: IncludeObject::Metadata,
        };
        for t in [Target::Object, Target::List, Target::Watch] {
            assert_eq!(n(KUBECTL, t).unwrap(), want);
        }
    }

    #[test]
    fn plain_and_missing_headers_are_json() {
        assert_eq!(
            negotiate(None, Target::List, IncludeObject::Metadata, false).unwrap(),
            Output::Json
        );
        for a in [
            "",
            "application/json",
            "*/*",
            "application/*",
            "APPLICATION/JSON; charset=utf-8",
        ] {
            assert_eq!(n(a, Target::List).unwrap(), Output::Json, "{a}");
        }
        // Protobuf first, JSON as the fallback: JSON.
        assert_eq!(
            n(
                "application/vnd.kubernetes.protobuf, application/json",
                Target::List
            )
            .unwrap(),
            Output::Json
        );
    }

    #[test]
    fn q_values_order_the_choice() {
        let a = "application/json;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io;q=0.9";
        assert!(matches!(n(a, Target::List).unwrap(), Output::Table { .. }));
        let a = "application/json;as=Table;v=v1;g=meta.k8s.io;q=0, application/json;q=0.1";
        assert_eq!(n(a, Target::List).unwrap(), Output::Json);
        let a = "application/json;as=Table;v=v1;g=meta.k8s.io;q=2, application/json";
        assert_eq!(
            n(a, Target::List).unwrap(),
            Output::Json,
            "invalid q ignored"
        );
    }

    #[test]
    fn partial_object_metadata_forms() {
        let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        let want = Output::Metadata { meta_version: "v1" };
        assert_eq!(n(list, Target::List).unwrap(), want);
        assert_eq!(n(one, Target::Object).unwrap(), want);
        assert_eq!(n(one, Target::Watch).unwrap(), want);
        assert_eq!(n(one, Target::List).unwrap_err().code(), 406);
        assert_eq!(n(list, Target::Object).unwrap_err().code(), 406);
    }

    #[test]
    fn unsatisfiable_headers_are_406() {
        for a in [
            "application/yaml",
            "text/html",
            "garbage",
            "application/json;as=Table;v=v9;g=meta.k8s.io",
            "application/json;as=Table;v=v1;g=other.io",
            "application/json;as=Widget;v=v1;g=meta.k8s.io",
            "application/json;q=0",
            ";;;,,,",
        ] {
            let e = n(a, Target::List).unwrap_err();
            assert_eq!(e.code(), 406, "{a}");
        }
    }

    #[test]
    fn include_object_values() {
        assert_eq!(include_object("").unwrap(), IncludeObject::Metadata);
        assert_eq!(
            include_object("includeObject=Object").unwrap(),
            IncludeObject::Object
        );
        assert_eq!(
            include_object("a=b&includeObject=None").unwrap(),
            IncludeObject::None
        );
        assert_eq!(include_object("includeObject=All").unwrap_err().code(), 400);
    }
}
