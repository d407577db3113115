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
        // Read as the list and watch handlers read them (first occurrence of each parameter,
        // the same boolean rules), so that what is authorized is what runs. Options that do
        // not parse fail the request in the handler; it is authorized as a plain list here.
        let opts = if *method == Method::GET || *method == Method::HEAD {
            api::list_options::ListOptions::from_query(query).ok()
        } else {
            None
        };
        if opts.as_ref().is_some_and(|o| o.is_watch()) {
            watch = true;
        }
        a.verb = match *method {
            Method::GET | Method::HEAD if watch => "watch".into(),
            Method::GET | Method::HEAD if a.name.is_empty() => "list".into(),
            Method::GET | Method::HEAD => "get".into(),
            Method::POST => "create".into(),
            Method::PUT => "update".into(),
            Method::PATCH => "patch".into(),
            Method::DELETE if a.name.is_empty() => "deletecollection".into(),
            Method::DELETE => "delete".into(),
            // Still a request about the resource: no rule but one for this verb allows it.
            _ => method.as_str().to_lowercase(),
        };
        // A list or watch of one object by name is authorized as that object.
        if matches!(a.verb.as_str(), "list" | "watch") && a.name.is_empty() {
            if let Some(n) = opts
                .as_ref()
                .and_then(|o| o.field_selector.requires_exact("metadata.name"))
            {
                a.name = n.to_string();
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
        // The first of two selectors is the one the handler uses, and so the one authorized.
        let a = at(
            Method::GET,
            "/api/v1/namespaces/d/secrets",
            "fieldSelector=&fieldSelector=metadata.name%3Dallowed",
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", ""));
        let a = at(
            Method::GET,
            "/api/v1/namespaces/d/secrets",
            "watch=0&watch=1",
        );
        assert_eq!(a.verb, "list");
        let a = at(Method::GET, "/api/v1/namespaces/d/secrets", "watch");
        assert_eq!(
            a.verb, "watch",
            "a bare watch parameter is a watch, as the handler reads it"
        );
        let a = at(
            Method::from_bytes(b"get").unwrap(),
            "/api/v1/namespaces/d/secrets",
            "",
        );
        assert!(a.resource_request);
        assert_eq!(a.verb, "get");
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
