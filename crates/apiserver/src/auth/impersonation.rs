//! Impersonation: a request that carries `Impersonate-User` (and optionally
//! `Impersonate-Group`, `Impersonate-Uid`, `Impersonate-Extra-KEY`) runs as that user if
//! the caller may `impersonate` each of them, as kube-apiserver's impersonation filter does.

use super::attributes::Attributes;
use super::user_info::{
    UserInfo, GROUP_AUTHENTICATED, GROUP_SERVICE_ACCOUNTS, GROUP_UNAUTHENTICATED, USER_ANONYMOUS,
};
use api::{Reason, Status};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";

/// True if `headers` ask for impersonation at all.
pub fn requested(headers: &http::HeaderMap) -> bool {
    headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
}

/// The user a request asks to run as, once `allowed` (the caller's authorizer) agrees to
/// each part; `None` if the request asks for no impersonation.
///
/// # Errors
/// 400 for groups, a uid or extras without a user (or a header that is not text); 403 naming
/// the first part the caller may not impersonate.
pub fn impersonate(
    headers: &http::HeaderMap,
    caller: &UserInfo,
    allowed: impl Fn(&Attributes) -> bool,
) -> Result<Option<UserInfo>, Status> {
    let text = |v: &http::HeaderValue| {
        v.to_str()
            .map(str::to_string)
            .map_err(|_| Status::bad_request("impersonation headers must be text"))
    };
    let mut user = None;
    let mut groups = Vec::new();
    let mut uid = None;
    let mut extra = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (name, value) in headers {
        let n = name.as_str();
        if n == USER {
            user = Some(text(value)?);
        } else if n == GROUP {
            groups.push(text(value)?);
        } else if n == UID {
            uid = Some(text(value)?);
        } else if let Some(key) = n.strip_prefix(EXTRA) {
            let key = path_unescape(key)
                .ok_or_else(|| Status::bad_request("malformed Impersonate-Extra- header name"))?;
            extra.entry(key).or_default().push(text(value)?);
        }
    }
    let Some(name) = user else {
        if groups.is_empty() && uid.is_none() && extra.is_empty() {
            return Ok(None);
        }
        return Err(Status::new(
            Reason::BadRequest,
            "requested impersonation of groups, a uid or extra fields without impersonating a user",
        ));
    };
    if name.is_empty() {
        return Err(Status::bad_request("Impersonate-User must not be empty"));
    }
    let check = |a: Attributes| -> Result<(), Status> {
        if allowed(&a) {
            return Ok(());
        }
        Err(
            Status::new(Reason::Forbidden, a.forbidden_message(&caller.name))
                .with_details(&a.resource, &a.name)
                .with_group(&a.api_group),
        )
    };
    let mut target = UserInfo {
        name: name.clone(),
        ..UserInfo::default()
    };
    match target.service_account_name() {
        Some((ns, sa)) => {
            check(Attributes::resource(
                "impersonate",
                "",
                "serviceaccounts",
                "",
                ns,
                sa,
            ))?;
            // A ServiceAccount's own groups, unless the request names groups itself.
            if groups.is_empty() {
                let ns = ns.to_string();
                target.groups = vec![
                    GROUP_SERVICE_ACCOUNTS.into(),
                    format!("{GROUP_SERVICE_ACCOUNTS}:{ns}"),
                ];
            }
        }
        None => check(Attributes::resource(
            "impersonate",
            "",
            "users",
            "",
            "",
            &name,
        ))?,
    }
    for g in &groups {
        check(Attributes::resource("impersonate", "", "groups", "", "", g))?;
        target.add_group(g);
    }
    if let Some(u) = uid {
        check(Attributes::resource(
            "impersonate",
            "authentication.k8s.io",
            "uids",
            "",
            "",
            &u,
        ))?;
        target.uid = u;
    }
    for (k, values) in &extra {
        for v in values {
            check(Attributes::resource(
                "impersonate",
                "authentication.k8s.io",
                "userextras",
                k,
                "",
                v,
            ))?;
        }
    }
    target.extra = extra;
    if name == USER_ANONYMOUS {
        target.add_group(GROUP_UNAUTHENTICATED);
    } else if !target.in_group(GROUP_UNAUTHENTICATED) {
        // Authenticated, unless the request asked for the unauthenticated group.
        target.add_group(GROUP_AUTHENTICATED);
    }
    Ok(Some(target))
}

/// Percent-decodes a header name's key as a URL path segment is (`+` stays `+`); `None` for a
/// malformed escape or a result that is not UTF-8.
fn path_unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn each_part_needs_the_impersonate_verb_on_it() {
        let caller = UserInfo::authenticated("alice", vec![]);
        let only_users = |a: &Attributes| a.verb == "impersonate" && a.resource == "users";
        assert_eq!(
            impersonate(&headers(&[]), &caller, only_users).unwrap(),
            None
        );
        let u = impersonate(
            &headers(&[("Impersonate-User", "bob")]),
            &caller,
            only_users,
        )
        .unwrap()
        .unwrap();
        assert_eq!(u.name, "bob");
        assert_eq!(u.groups, ["system:authenticated"]);
        let e = impersonate(
            &headers(&[
                ("Impersonate-User", "bob"),
                ("Impersonate-Group", "system:masters"),
            ]),
            &caller,
            only_users,
        )
        .unwrap_err();
        assert_eq!(e.code(), 403);
        assert!(
            e.message.contains("cannot impersonate resource \"groups\""),
            "{}",
            e.message
        );
        let e =
            impersonate(&headers(&[("Impersonate-Group", "g")]), &caller, |_| true).unwrap_err();
        assert_eq!(e.code(), 400);
        let sa = impersonate(
            &headers(&[("Impersonate-User", "system:serviceaccount:ns:bot")]),
            &caller,
            |a| a.resource == "serviceaccounts" && a.namespace == "ns" && a.name == "bot",
        )
        .unwrap()
        .unwrap();
        assert_eq!(sa.groups[1], "system:serviceaccounts:ns");
        assert_eq!(
            impersonate(&headers(&[("Impersonate-User", "bob")]), &caller, |_| false)
                .unwrap_err()
                .code(),
            403
        );
        let x = impersonate(
            &headers(&[
                ("Impersonate-User", "bob"),
                ("Impersonate-Extra-Scopes%2Fa", "s1"),
            ]),
            &caller,
            |a| a.resource != "userextras" || (a.subresource == "scopes/a" && a.name == "s1"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(x.extra["scopes/a"], ["s1"]);
        assert_eq!(path_unescape("a+b%2Fc").as_deref(), Some("a+b/c"));
        assert_eq!(path_unescape("bad%2"), None);
        assert_eq!(path_unescape("bad%zz"), None);
        // A ServiceAccount named with groups of the request's own, and an unauthenticated
        // user asked for.
        let u = impersonate(
            &headers(&[
                ("Impersonate-User", "system:serviceaccount:ns:bot"),
                ("Impersonate-Group", "system:unauthenticated"),
            ]),
            &caller,
            |_| true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(u.groups, ["system:unauthenticated"]);
    }
}
