//! URL routing: turns a request path into a [`Route`].

use crate::handlers::RequestInfo;
use crate::registry::apiextensions::CustomResources;
use crate::registry::resources;
use api::Status;

/// Where a request goes.
#[derive(Debug, Clone)]
pub enum Route {
    /// `/version`
    Version,
    /// `/healthz`, `/livez`, `/readyz` (and their sub-checks).
    Health(String),
    /// `/metrics`
    Metrics,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`
    ResourceList(String, String),
    /// `/openapi/v3`
    OpenApiV3Root,
    /// `/openapi/v3/{api/v1 | apis/g/v}`
    OpenApiV3(String),
    /// `/openapi/v2`
    OpenApiV2,
    /// `/.well-known/openid-configuration`: the ServiceAccount token issuer's OpenID
    /// discovery document.
    OidcDiscovery,
    /// `/openid/v1/jwks`: the keys ServiceAccount tokens are signed with.
    Jwks,
    /// A self-review (`kubectl auth can-i`, `kubectl auth whoami`); see
    /// [`crate::handlers::access_review`].
    Review(&'static crate::handlers::access_review::Review),
    /// A resource URL.
    Resource(RequestInfo),
}

/// Parses a request path (without the query string); resources are the built-in ones and
/// the custom ones `custom` serves.
pub fn route(path: &str, custom: &CustomResources) -> Result<Route, Status> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => Ok(Route::Version),
        [h @ ("healthz" | "livez" | "readyz"), ..] => Ok(Route::Health(h.to_string())),
        ["metrics"] => Ok(Route::Metrics),
        ["api"] => Ok(Route::CoreVersions),
        ["apis"] => Ok(Route::Groups),
        ["apis", g] => Ok(Route::Group(g.to_string())),
        ["api", v] => Ok(Route::ResourceList(String::new(), v.to_string())),
        ["apis", g, v] => Ok(Route::ResourceList(g.to_string(), v.to_string())),
        ["openapi", "v3"] => Ok(Route::OpenApiV3Root),
        ["openapi", "v3", rest @ ..] => Ok(Route::OpenApiV3(rest.join("/"))),
        ["openapi", "v2"] => Ok(Route::OpenApiV2),
        [".well-known", "openid-configuration"] => Ok(Route::OidcDiscovery),
        ["openid", "v1", "jwks"] => Ok(Route::Jwks),
        ["api", v, rest @ ..] => resource_route(custom, "", v, rest),
        ["apis", g, v, rest @ ..] => match (
            rest,
            crate::handlers::access_review::find(g, v, rest.first().copied().unwrap_or("")),
        ) {
            ([_], Some(review)) => Ok(Route::Review(review)),
            _ => resource_route(custom, g, v, rest),
        },
        _ => Err(Status::path_not_found()),
    }
}

fn resource_route(
    custom: &CustomResources,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Route, Status> {
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    if let (("", "v1"), ["namespaces", ns, "bindings"], false) =
        ((group, version), rest, legacy_watch)
    {
        // The legacy `bindings` collection: a pod's binding that names the pod in its body.
        let info = resources::find("", "v1", "pods").ok_or_else(Status::path_not_found)?;
        return Ok(Route::Resource(RequestInfo {
            info,
            namespace: Some(ns.to_string()),
            name: None,
            subresource: Some("binding".into()),
            legacy_watch: false,
        }));
    }
    let namespaced_target = |r: &str| custom.find(group, version, r).is_some_and(|i| i.namespaced);
    let (namespace, rest) = match rest {
        ["namespaces", ns, r, ..] if namespaced_target(r) => (Some(ns.to_string()), &rest[2..]),
        _ => (None, rest),
    };
    let (resource, name, sub) = match rest {
        [r] => (*r, None, None),
        [r, n] => (*r, Some(*n), None),
        [r, n, s] => (*r, Some(*n), Some(*s)),
        _ => return Err(Status::path_not_found()),
    };
    let info = custom
        .find(group, version, resource)
        .ok_or_else(Status::path_not_found)?;
    if info.namespaced && namespace.is_none() && name.is_some() {
        return Err(Status::path_not_found());
    }
    if let Some(s) = sub {
        let pods = info.group.is_empty() && info.resource == "pods";
        let namespaces = info.group.is_empty() && info.resource == "namespaces";
        let served = (s == "status" && info.has_status)
            || (s == "finalize" && namespaces)
            || (s == "scale" && crate::handlers::scale::has_scale(info))
            || (pods && matches!(s, "binding" | "eviction"))
            || (s == "token" && info.group.is_empty() && info.resource == "serviceaccounts");
        if !served || legacy_watch {
            return Err(Status::path_not_found());
        }
    }
    Ok(Route::Resource(RequestInfo {
        info,
        namespace,
        name: name.map(str::to_string),
        subresource: sub.map(str::to_string),
        legacy_watch,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> RequestInfo {
        match route(path, &CustomResources::default()).unwrap() {
            Route::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn resource_paths() {
        let r = res("/api/v1/namespaces/default/pods/nginx/status");
        assert_eq!(r.info.resource, "pods");
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("nginx"));
        assert_eq!(r.subresource.as_deref(), Some("status"));
        let r = res("/api/v1/namespaces/kube-system");
        assert_eq!(r.info.resource, "namespaces");
        assert_eq!(r.name.as_deref(), Some("kube-system"));
        let r = res("/api/v1/namespaces/x/status");
        assert_eq!(
            (r.info.resource, r.subresource.as_deref()),
            ("namespaces", Some("status"))
        );
        let r = res("/api/v1/namespaces/x/finalize");
        assert_eq!(
            (r.info.resource, r.subresource.as_deref()),
            ("namespaces", Some("finalize"))
        );
        let r = res("/api/v1/pods");
        assert!(r.namespace.is_none() && r.name.is_none());
        let r = res("/api/v1/watch/namespaces/ns/pods/p");
        assert!(r.legacy_watch);
        assert_eq!(r.name.as_deref(), Some("p"));
        let r = res("/apis/apps/v1/namespaces/ns/deployments");
        assert_eq!(r.info.kind, "Deployment");
        let r = res("/api/v1/nodes/n1");
        assert_eq!(r.name.as_deref(), Some("n1"));
        for sub in ["binding", "eviction"] {
            let r = res(&format!("/api/v1/namespaces/ns/pods/p/{sub}"));
            assert_eq!(
                (r.info.resource, r.subresource.as_deref()),
                ("pods", Some(sub))
            );
        }
        let r = res("/api/v1/namespaces/ns/bindings");
        assert_eq!(r.info.resource, "pods");
        assert_eq!((r.name, r.subresource.as_deref()), (None, Some("binding")));
        let r = res("/apis/events.k8s.io/v1/namespaces/ns/events/e");
        assert_eq!((r.info.group, r.info.kind), ("events.k8s.io", "Event"));
    }

    #[test]
    fn unknown_paths_are_404() {
        for p in [
            "/api/v1/widgets",
            "/api/v1/pods/x",
            "/api/v1/namespaces/a/configmaps/b/status",
            "/api/v1/namespaces/a/configmaps/b/binding",
            "/api/v1/namespaces/a/configmaps/b/finalize",
            "/api/v1/nodes/n/finalize",
            "/api/v1/namespaces/a/pods/b/scale",
            "/api/v1/watch/namespaces/a/pods/b/eviction",
            "/api/v1/bindings",
            "/api/v1/namespaces/a/pods/b/c/d",
            "/apis/apps/v2/deployments",
            "/nothing",
        ] {
            assert_eq!(
                route(p, &CustomResources::default()).unwrap_err().code(),
                404,
                "{p}"
            );
        }
    }
}
