//! What a listener without authentication (`--insecure-bind`) refuses so that a web page
//! cannot drive it.
//!
//! Such a listener is bound to a loopback address, but a browser on the same machine sends
//! requests there on behalf of any page it shows: a page's `fetch(…, {mode: "no-cors"})` can
//! POST a body without a content type (the server would read it as JSON), and after DNS
//! rebinding a page of `evil.example` reads the answers too (its requests then carry
//! `Host: evil.example`). kubectl, client-go and the other API clients always name their
//! body's media type, address the server by a loopback name or address, and send no
//! `Origin`. So a request is refused when its host is not a loopback one (403), when it
//! carries an `Origin` other than this listener's own (403), or when it is a write without
//! a JSON, YAML or protobuf content type (415). WebSocket upgrades are requests like any
//! other here, and browsers always send `Origin` with them.

use api::{Reason, Status};
use http::header::{CONTENT_TYPE, HOST, ORIGIN};
use http::{HeaderMap, Method, Uri};
use std::net::{IpAddr, Ipv6Addr};

/// The media types a write may carry: every body format the API reads.
const WRITE_MEDIA_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// Checks a request's head: `Ok` if it may run on a listener without authentication, else
/// the Status to answer instead.
///
/// The host is the `Host` header and, when the request carries an authority (an absolute
/// URI, or HTTP/2's `:authority`), that too; each must be `localhost`, an address in
/// 127.0.0.0/8 or `[::1]`, with or without a port (a request naming no host is let through:
/// browsers always name one). An `Origin` must be `http://` and exactly the host the request
/// was sent to. POST, PUT and PATCH must name one of the API's body media types.
pub fn check(method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), Status> {
    let mut hosts = Vec::new();
    for v in headers.get_all(HOST) {
        hosts.push(v.to_str().unwrap_or("\u{fffd}").trim());
    }
    if let Some(a) = uri.authority() {
        hosts.push(a.as_str());
    }
    if let Some(bad) = hosts.iter().find(|h| !is_loopback_host(h)) {
        return Err(forbidden(format!(
            "host {bad:?} is not a loopback name or address: this port serves local clients only"
        )));
    }
    for origin in headers.get_all(ORIGIN) {
        let origin = origin.to_str().unwrap_or("\u{fffd}").trim();
        let own = origin
            .strip_prefix("http://")
            .is_some_and(|a| !hosts.is_empty() && hosts.iter().all(|h| h.eq_ignore_ascii_case(a)));
        if !own {
            return Err(forbidden(format!(
                "requests from origin {origin:?} are not served on this port"
            )));
        }
    }
    if matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        let given = headers
            .get(CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("\u{fffd}"));
        let media = given
            .and_then(|ct| ct.split(';').next())
            .map(str::trim)
            .unwrap_or("");
        if !WRITE_MEDIA_TYPES
            .iter()
            .any(|m| m.eq_ignore_ascii_case(media))
        {
            return Err(Status::new(
                Reason::UnsupportedMediaType,
                format!(
                    "a {method} on this port must name its body's media type (one of {}); got {:?}",
                    WRITE_MEDIA_TYPES.join(", "),
                    given.unwrap_or("none")
                ),
            ));
        }
    }
    Ok(())
}

fn forbidden(message: String) -> Status {
    Status::new(Reason::Forbidden, message)
}

/// `localhost`, 127.0.0.0/8 or `[::1]`, optionally with a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // An IPv6 literal: `[addr]` or `[addr]:port`.
        let Some((addr, after)) = rest.split_once(']') else {
            return false;
        };
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return false;
        }
        return addr
            .parse::<Ipv6Addr>()
            .is_ok_and(|a| IpAddr::V6(a).to_canonical().is_loopback());
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return false,
            None => host,
        }
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn code(method: Method, uri: &str, pairs: &[(&'static str, &str)]) -> u16 {
        match check(&method, &uri.parse().unwrap(), &head(pairs)) {
            Ok(()) => 200,
            Err(s) => s.code(),
        }
    }

    #[test]
    fn loopback_hosts_with_or_without_ports() {
        for ok in [
            "localhost",
            "LOCALHOST:8080",
            "localhost.",
            "127.0.0.1",
            "127.1.2.3:6443",
            "[::1]",
            "[::1]:80",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:80",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.1",
            "0.0.0.0",
            "[::2]",
            "::1",
            "[::1",
            "localhost:",
            "localhost:x",
            "localhost:123456",
            "",
            "\u{fffd}",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn hosts_origins_and_write_media_types() {
        let get = |pairs: &[(&'static str, &str)]| code(Method::GET, "/api/v1/pods", pairs);
        assert_eq!(get(&[("host", "127.0.0.1:8080")]), 200);
        assert_eq!(get(&[]), 200);
        assert_eq!(get(&[("host", "evil.example")]), 403);
        assert_eq!(get(&[("host", "localhost"), ("host", "evil.example")]), 403);
        assert_eq!(
            code(
                Method::GET,
                "http://evil.example/api",
                &[("host", "localhost")]
            ),
            403
        );
        assert_eq!(code(Method::GET, "http://localhost:1/api", &[]), 200);
        // Origin: only this very host, over http.
        let at = ("host", "localhost:8080");
        assert_eq!(get(&[at, ("origin", "http://localhost:8080")]), 200);
        for o in [
            "http://evil.example",
            "null",
            "https://localhost:8080",
            "http://localhost:8081",
            "http://127.0.0.1:8080",
            "http://localhost:8080/",
        ] {
            assert_eq!(get(&[at, ("origin", o)]), 403, "{o}");
        }
        assert_eq!(get(&[("origin", "http://localhost")]), 403);
        // Writes name their body's media type.
        for m in [Method::POST, Method::PUT, Method::PATCH] {
            assert_eq!(code(m.clone(), "/x", &[at]), 415, "{m}");
            assert_eq!(
                code(m.clone(), "/x", &[at, ("content-type", "text/plain")]),
                415
            );
            assert_eq!(code(m.clone(), "/x", &[at, ("content-type", "")]), 415);
            assert_eq!(
                code(
                    m.clone(),
                    "/x",
                    &[at, ("content-type", "application/json; charset=utf-8")]
                ),
                200
            );
            assert_eq!(
                code(
                    m,
                    "/x",
                    &[at, ("content-type", "Application/Apply-Patch+YAML")]
                ),
                200
            );
        }
        assert_eq!(code(Method::DELETE, "/x", &[at]), 200);
    }
}
