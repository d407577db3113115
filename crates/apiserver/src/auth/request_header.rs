//! The request-header (front-proxy) authenticator: the user named by `X-Remote-User` and
//! the groups named by each `X-Remote-Group` header, as kube-apiserver reads them from an
//! authenticating proxy.
//!
//! The headers prove nothing by themselves, so they are read only on connections whose
//! other end is trusted to have set them: in listwatch, the in-process requests of
//! [`crate::server::in_process`], which nothing outside the process can open. Every other
//! listener ignores them.

use super::user_info::UserInfo;
use api::Status;
use std::sync::Arc;

/// The header naming the user.
pub const USER_HEADER: &str = "x-remote-user";

/// The header naming one group (repeated for several).
pub const GROUP_HEADER: &str = "x-remote-group";

/// The user the front-proxy headers of a request name, with `system:authenticated`.
///
/// # Errors
/// 401 unless exactly one non-empty `X-Remote-User` is given, and it and every group are
/// valid UTF-8 (a proxy that names nobody has authenticated nobody).
pub fn user_of(headers: &http::HeaderMap) -> Result<Arc<UserInfo>, Status> {
    let mut users = headers.get_all(USER_HEADER).iter();
    let (Some(user), None) = (users.next(), users.next()) else {
        return Err(Status::unauthorized());
    };
    let user = user.to_str().map_err(|_| Status::unauthorized())?;
    if user.is_empty() {
        return Err(Status::unauthorized());
    }
    let groups = headers
        .get_all(GROUP_HEADER)
        .iter()
        .map(|g| g.to_str().map(String::from))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| Status::unauthorized())?;
    Ok(Arc::new(UserInfo::authenticated(user, groups)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &[u8])]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_headers_name_the_user_and_groups() {
        let u = user_of(&headers(&[
            ("x-remote-user", b"system:node:n1"),
            ("x-remote-group", b"system:nodes"),
            ("X-Remote-Group", b"extra"),
        ]))
        .unwrap();
        assert_eq!(u.name, "system:node:n1");
        assert_eq!(
            u.groups,
            ["system:nodes", "extra", "system:authenticated"].map(String::from)
        );
    }

    #[test]
    fn no_user_one_empty_user_or_two_users_authenticate_nobody() {
        let code = |h: &[(&str, &[u8])]| {
            user_of(&headers(h))
                .map(|u| u.name.clone())
                .map_err(|s| s.code())
        };
        assert_eq!(code(&[]), Err(401));
        assert_eq!(code(&[("x-remote-group", b"system:masters")]), Err(401));
        assert_eq!(code(&[("x-remote-user", b"")]), Err(401));
        assert_eq!(
            code(&[("x-remote-user", b"a"), ("x-remote-user", b"b")]),
            Err(401)
        );
        assert_eq!(code(&[("x-remote-user", b"caf\xc3\xa9\xff")]), Err(401));
        assert_eq!(
            code(&[("x-remote-user", b"a"), ("x-remote-group", b"\xff")]),
            Err(401)
        );
        assert_eq!(code(&[("x-remote-user", b"a")]), Ok("a".into()));
    }
}
