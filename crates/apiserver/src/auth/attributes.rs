//! What a request asks to do, in the terms authorizers decide on (kube-apiserver's
//! `authorizer.Attributes`), read from the request's method, path and query alone, as
//! kube-apiserver's request-info parser does: the server need not serve a resource for a
//! request about it to be authorized (an unauthorized caller gets 403, never a 404 that
//! tells what exists).

use http::Method;

/// One request, as an authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`
    /// (resource requests), or the lower-cased method (non-resource requests); `impersonate`,
    /// `bind`, `escalate` for the checks the server makes itself.
    pub verb: String,
    /// True for a request about an API resource; false for any other path.
    pub resource_request: bool,
    /// The API group (`""` for the core group).
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The resource (`pods`).
    pub resource: String,
    /// The subresource (`status`, `log`), or empty.
    pub subresource: String,
    /// The namespace, or empty for cluster-scoped and all-namespaces requests.
    pub namespace: String,
    /// The object's name, or empty.
    pub name: String,
    /// The URL path (non-resource requests).
    pub path: String,
}

impl Attributes {
    /// A resource request's attributes.
    pub fn resource(
        verb: &str,
        api_group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            api_group: api_group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Attributes::default()
        }
    }

    /// A non-resource request's attributes.
    pub fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            path: path.into(),
            ..Attributes::default()
        }
    }

    /// Reads the attributes of a request from its method, path and query.
    pub fn from_request(method: &Method, path: &str, query: &str) -> Attributes {
        let non_resource = || Attributes::non_resource(&method.as_str().to_lowercase(), path);
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, version, mut rest) = match parts.as_slice() {
            ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
            ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
            _ => return non_resource(),
        };
        let mut a = Attributes {
            resource_request: true,
            api_group: group.into(),
            api_version: version.into(),
            path: path.into(),
            ..Attributes::default()
        };
        let mut watch = false;
        if rest.len() >= 2 && rest[0] == "watch" {
            watch = true;
            rest = &rest[1..];
        }
        if rest[0] == "namespaces" && rest.len() > 1 {
            a.namespace = rest[1].into();
            // `namespaces/NAME/status` and `/finalize` are the namespace's own subresources.
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        a.resource = rest[0].into();
        if let Some(n) = rest.get(1) {
            a.name = (*n).into();
        }
        if let Some(s) = rest.get(2) {
            a.subresource = (*s).into();
        }
        let mut field_name = None;
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "watch" if !(v == "0" || v.eq_ignore_ascii_case("false") || v.is_empty()) => {
                    watch = true
                }
                "fieldSelector" => field_name = single_name(&v),
                _ => {}
            }
        }
        a.verb = match *method {
            Method::GET | Method::HEAD if watch => "watch",
            Method::GET | Method::HEAD if a.name.is_empty() => "list",
            Method::GET | Method::HEAD => "get",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if a.name.is_empty() => "deletecollection",
            Method::DELETE => "delete",
            _ => return non_resource(),
        }
        .into();
        // A list or watch of one object by name is authorized as that object.
        if matches!(a.verb.as_str(), "list" | "watch") && a.name.is_empty() {
            if let Some(n) = field_name {
                a.name = n;
            }
        }
        a
    }

    /// How a refusal names the request (`User "alice" cannot list resource "pods" in API
    /// group "" in the namespace "default"`), as kube-apiserver words it.
    pub fn forbidden_message(&self, user: &str) -> String {
        if !self.resource_request {
            return format!(
                "forbidden: User \"{user}\" cannot {} path \"{}\"",
                self.verb, self.path
            );
        }
        let what = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let group_resource = if self.api_group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.api_group)
        };
        let subject = if self.name.is_empty() {
            group_resource
        } else {
            format!("{group_resource} \"{}\"", self.name)
        };
        let scope = if self.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", self.namespace)
        };
        format!(
            "{subject} is forbidden: User \"{user}\" cannot {} resource \"{what}\" in API group \"{}\" {scope}",
            self.verb, self.api_group
        )
    }
}

/// The name a field selector asks for when it is exactly `metadata.name=NAME` (or `==`).
fn single_name(selector: &str) -> Option<String> {
    let sel = selector.trim();
    if sel.contains(',') {
        return None;
    }
    let value = sel
        .strip_prefix("metadata.name==")
        .or_else(|| sel.strip_prefix("metadata.name="))?;
    (!value.is_empty() && !value.starts_with('=')).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(method: Method, path: &str, query: &str) -> Attributes {
        Attributes::from_request(&method, path, query)
    }

    #[test]
    fn resource_requests() {
        let a = at(Method::GET, "/api/v1/namespaces/ns1/pods", "");
        assert_eq!(
            a,
            Attributes {
                path: "/api/v1/namespaces/ns1/pods".into(),
                api_version: "v1".into(),
                ..Attributes::resource("list", "", "pods", "", "ns1", "")
            }
        );
        let a = at(Method::GET, "/api/v1/namespaces/ns1/pods", "watch=true");
        assert_eq!(a.verb, "watch");
        let a = at(Method::GET, "/api/v1/watch/namespaces/ns1/pods/p1", "");
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "p1"));
        let a = at(
            Method::PUT,
            "/apis/apps/v1/namespaces/d/deployments/x/scale",
            "",
        );
        assert_eq!(
            (
                a.verb.as_str(),
                a.api_group.as_str(),
                a.subresource.as_str()
            ),
            ("update", "apps", "scale")
        );
        let a = at(Method::DELETE, "/api/v1/namespaces/d/configmaps", "");
        assert_eq!(a.verb, "deletecollection");
        let a = at(Method::POST, "/api/v1/namespaces/d/pods/p/eviction", "");
        assert_eq!(
            (a.verb.as_str(), a.subresource.as_str()),
            ("create", "eviction")
        );
        let a = at(Method::PATCH, "/api/v1/nodes/n1/status", "");
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.name.as_str()),
            ("patch", "", "n1")
        );
    }

    #[test]
    fn namespaces_are_their_own_namespace() {
        let a = at(Method::GET, "/api/v1/namespaces/team", "");
        assert_eq!(
            (a.resource.as_str(), a.name.as_str(), a.namespace.as_str()),
            ("namespaces", "team", "team")
        );
        let a = at(Method::PUT, "/api/v1/namespaces/team/finalize", "");
        assert_eq!(
            (
                a.resource.as_str(),
                a.subresource.as_str(),
                a.namespace.as_str()
            ),
            ("namespaces", "finalize", "team")
        );
        let a = at(Method::GET, "/api/v1/namespaces", "");
        assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("list", ""));
    }

    #[test]
    fn a_named_list_is_about_that_object() {
        let a = at(
            Method::GET,
            "/api/v1/namespaces/d/secrets",
            "fieldSelector=metadata.name%3Dtoken&watch=1",
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "token"));
        let a = at(
            Method::GET,
            "/api/v1/namespaces/d/secrets",
            "fieldSelector=metadata.name%3Da,type%3Db",
        );
        assert_eq!(a.name, "");
    }

    #[test]
    fn discovery_and_other_paths_are_non_resource() {
        for p in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/healthz",
            "/",
        ] {
            let a = at(Method::GET, p, "");
            assert!(!a.resource_request, "{p}");
            assert_eq!(a.verb, "get");
        }
        assert_eq!(at(Method::POST, "/version", "").verb, "post");
    }

    #[test]
    fn refusals_read_as_kube_apiserver_words_them() {
        let a = at(Method::GET, "/api/v1/namespaces/kube-system/secrets/s", "");
        assert_eq!(
            a.forbidden_message("alice"),
            "secrets \"s\" is forbidden: User \"alice\" cannot get resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
        );
        let a = at(Method::GET, "/metrics", "");
        assert_eq!(
            a.forbidden_message("system:anonymous"),
            "forbidden: User \"system:anonymous\" cannot get path \"/metrics\""
        );
    }
}
