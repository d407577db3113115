//! The list and watch query parameters: `resourceVersion`, `continue` tokens, and the whole
//! query string.

use api::continue_token::ContinueToken;
use api::list_options::{ListOptions, ResourceVersion};

/// Feeds the bytes (when UTF-8) to [`ResourceVersion::parse`]. A version that parses must
/// print a string that parses to the same version.
pub fn resource_version(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(rv) = ResourceVersion::parse(s) else {
        return;
    };
    let printed = rv.to_string();
    let again = ResourceVersion::parse(&printed)
        .unwrap_or_else(|e| panic!("{printed:?}, printed from {rv:?}, does not parse: {e:?}"));
    assert_eq!(again, rv);
    assert_eq!(rv.is_unset(), s.is_empty());
}

/// Feeds the bytes (when UTF-8) to [`ContinueToken::decode`]. A token that decodes must
/// re-encode to a token that decodes to the same; and the token resuming after its start key
/// must decode too (its key only grows by a NUL, which keeps every segment safe).
pub fn continue_token(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(token) = ContinueToken::decode(s) else {
        return;
    };
    assert_ne!(token.resource_version, 0, "a decoded token has rv 0");
    assert!(
        !token.start_key.is_empty(),
        "a decoded token has no start key"
    );
    let encoded = token.encode();
    let again = ContinueToken::decode(&encoded)
        .unwrap_or_else(|e| panic!("{encoded:?}, encoded from {token:?}, does not decode: {e:?}"));
    assert_eq!(again, token);
    let next = ContinueToken::after(token.resource_version, &token.start_key);
    let decoded = ContinueToken::decode(&next.encode())
        .unwrap_or_else(|e| panic!("the token after {token:?} does not decode: {e:?}"));
    assert_eq!(decoded, next);
}

/// Feeds the bytes (when UTF-8) as a query string to [`ListOptions::from_query`] and
/// [`ListOptions::from_watch_query`]. Options that parse must print a query
/// ([`ListOptions::to_query`]) that parses to equal options.
pub fn list_options(data: &[u8]) {
    let Ok(q) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(opts) = ListOptions::from_query(q) {
        let printed = opts.to_query();
        let again = ListOptions::from_query(&printed)
            .unwrap_or_else(|e| panic!("{printed:?}, printed from {q:?}, does not parse: {e:?}"));
        assert_eq!(
            again, opts,
            "{printed:?} parses to other options than {q:?}"
        );
    }
    if let Ok(opts) = ListOptions::from_watch_query(q) {
        let printed = opts.to_query();
        let again = ListOptions::from_watch_query(&printed)
            .unwrap_or_else(|e| panic!("{printed:?}, printed from {q:?}, does not parse: {e:?}"));
        assert_eq!(
            again, opts,
            "{printed:?} parses to other options than {q:?}"
        );
    }
}
