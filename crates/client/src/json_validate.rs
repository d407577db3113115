//! A one-pass JSON validator (RFC 8259) that also reports where values begin and end. The
//! watch decoder uses it to check an event line and locate its `object` in one walk, and
//! [`crate::object::DynamicObject::from_json`] to check an object, without building anything.
//!
//! It accepts what `serde_json` accepts when it parses into a `Value` (same nesting limit of
//! 128, lone surrogate escapes refused) — checked by property tests against `serde_json` —
//! except numbers beyond `f64`'s range, which JSON allows and which are accepted here as
//! `serde_json` accepts them when it only skips a value. Strings, the bulk of Kubernetes
//! objects, are looked at byte by byte while short and with a SIMD search for
//! their end, then checked for control characters and — only if they hold non-ASCII bytes —
//! for UTF-8, both in one vectorised pass.

use std::fmt;

/// Deepest nesting of arrays and objects accepted (as `serde_json`'s default).
const MAX_DEPTH: usize = 128;

/// Why some text is not valid JSON, and at which byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// What was wrong.
    pub what: &'static str,
    /// Byte offset where it was noticed.
    pub at: usize,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for JsonError {}

/// A cursor over JSON text. Every method validates what it passes over.
pub struct Validator<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Validator<'a> {
    /// A cursor at the start of `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Validator { b, i: 0 }
    }

    /// The current byte offset.
    pub fn pos(&self) -> usize {
        self.i
    }

    /// The whole text the cursor walks (spans returned by [`Validator::value`] index it).
    pub fn text(&self) -> &'a [u8] {
        self.b
    }

    /// Consumes a `null` literal if one comes next (after whitespace): true if it did.
    ///
    /// # Errors
    /// When the next value starts with `n` but is not `null`.
    pub fn null(&mut self) -> Result<bool, JsonError> {
        if self.peek() != Some(b'n') {
            return Ok(false);
        }
        self.literal(b"null")?;
        Ok(true)
    }

    fn err<T>(&self, what: &'static str) -> Result<T, JsonError> {
        Err(self.error(what))
    }

    /// Failures are rare: kept out of line so the paths that succeed stay short.
    #[cold]
    #[inline(never)]
    fn error(&self, what: &'static str) -> JsonError {
        JsonError { what, at: self.i }
    }

    /// Skips whitespace; the next byte, if any.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        while let Some(&c) = self.b.get(self.i) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(c);
            }
            self.i += 1;
        }
        None
    }

    /// Consumes `c` (after whitespace) or fails with `what`.
    #[inline]
    pub fn expect(&mut self, c: u8, what: &'static str) -> Result<(), JsonError> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            self.err(what)
        }
    }

    /// Only whitespace remains.
    pub fn end(&mut self) -> Result<(), JsonError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => self.err("trailing characters"),
        }
    }

    /// Validates a string; returns its raw content (between the quotes, escapes as written)
    /// and whether it contains escapes.
    // Inlined into every caller: strings are most of an object's tokens, and with a call per
    // string validating a pod's watch line took half as long again (BENCHMARKS.md, session 11).
    #[inline(always)]
    pub fn string(&mut self) -> Result<(&'a [u8], bool), JsonError> {
        self.expect(b'"', "expected a string")?;
        let b = self.b;
        let start = self.i;
        // Most strings in objects are short keys and values, finished here; long ones
        // (annotations, data) and those with escapes or non-ASCII bytes go on in
        // `string_rest`. The index lives in a register until the end.
        let short_end = b.len().min(start + SHORT);
        let mut i = start;
        // Eight bytes at a time while eight remain: the first special byte of a word is found
        // without looking at its bytes one by one.
        while i < short_end {
            let Some(word) = b.get(i..i + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()) else {
                break;
            };
            let special = special_bytes(u64::from_le_bytes(word));
            if special == 0 {
                i += 8;
                continue;
            }
            i += (special.trailing_zeros() / 8) as usize;
            if b.get(i) == Some(&b'"') {
                self.i = i + 1;
                return Ok((b.get(start..i).unwrap_or_default(), false));
            }
            break;
        }
        while i < short_end {
            let Some(&c) = b.get(i) else {
                break;
            };
            if SPECIAL[usize::from(c)] {
                if c == b'"' {
                    self.i = i + 1;
                    return Ok((b.get(start..i).unwrap_or_default(), false));
                }
                break;
            }
            i += 1;
        }
        self.i = i;
        self.string_rest(start)
    }

    /// The rest of a string that began at `start` (after its quote), from the cursor on:
    /// SIMD searches for its end, escapes one by one.
    #[inline(never)]
    fn string_rest(&mut self, start: usize) -> Result<(&'a [u8], bool), JsonError> {
        let mut escaped = false;
        loop {
            let rest = self.b.get(self.i..).unwrap_or_default();
            let n = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
            check_plain(rest.get(..n).unwrap_or_default())
                .map_err(|what| JsonError { what, at: self.i })?;
            self.i += n;
            match self.b.get(self.i) {
                Some(b'"') => {
                    let raw = self.b.get(start..self.i).unwrap_or_default();
                    self.i += 1;
                    return Ok((raw, escaped));
                }
                Some(_) => {
                    escaped = true;
                    self.escape()?;
                }
                None => {
                    self.i = start;
                    return self.err("unterminated string");
                }
            }
        }
    }

    /// One escape sequence at a backslash.
    fn escape(&mut self) -> Result<(), JsonError> {
        self.i += 1;
        match self.b.get(self.i) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.i += 1;
                Ok(())
            }
            Some(b'u') => {
                self.i += 1;
                let unit = self.hex4()?;
                match unit {
                    0xD800..=0xDBFF => {
                        // A high surrogate must be followed by an escaped low one.
                        if self.b.get(self.i..self.i + 2) != Some(b"\\u") {
                            return self.err("lone leading surrogate in hex escape");
                        }
                        self.i += 2;
                        match self.hex4()? {
                            0xDC00..=0xDFFF => Ok(()),
                            _ => self.err("lone leading surrogate in hex escape"),
                        }
                    }
                    0xDC00..=0xDFFF => self.err("lone trailing surrogate in hex escape"),
                    _ => Ok(()),
                }
            }
            _ => self.err("invalid escape"),
        }
    }

    fn hex4(&mut self) -> Result<u16, JsonError> {
        let Some(digits) = self.b.get(self.i..self.i + 4) else {
            return self.err("unterminated hex escape");
        };
        let mut v = 0u16;
        for &d in digits {
            let x = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return self.err("invalid hex escape"),
            };
            v = (v << 4) | u16::from(x);
        }
        self.i += 4;
        Ok(v)
    }

    /// After a member or element: `,` (true) or `close` (false).
    #[inline]
    pub fn next_member(&mut self, close: u8) -> Result<bool, JsonError> {
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                Ok(true)
            }
            Some(c) if c == close => {
                self.i += 1;
                Ok(false)
            }
            _ => self.err("expected `,` or the end of a container"),
        }
    }

    /// Validates one value of any type; returns its span.
    pub fn value(&mut self) -> Result<(usize, usize), JsonError> {
        self.value_at(0)
    }

    /// Steps over one JSON object known to be well-formed (written by a JSON encoder this
    /// process trusts), finding its end by its braces and strings alone, without
    /// validating it; returns its span. `None`, having moved nothing, when the next value is
    /// not an object or its braces do not close within the text. On text that is not
    /// well-formed the span is meaningless (but within the text).
    pub(crate) fn skip_trusted_object(&mut self) -> Option<(usize, usize)> {
        if self.peek() != Some(b'{') {
            return None;
        }
        let start = self.i;
        let mut i = start;
        let mut depth = 0usize;
        while let Some(off) = memchr::memchr3(b'"', b'{', b'}', self.b.get(i..)?) {
            i += off;
            match self.b[i] {
                b'"' => {
                    i += 1;
                    loop {
                        let off = memchr::memchr2(b'"', b'\\', self.b.get(i..)?)?;
                        i += off;
                        if self.b[i] == b'"' {
                            break;
                        }
                        i += 2; // an escape: its next byte is never the closing quote
                    }
                }
                b'{' => depth += 1,
                _ => {
                    depth -= 1;
                    if depth == 0 {
                        self.i = i + 1;
                        return Some((start, self.i));
                    }
                }
            }
            i += 1;
        }
        None
    }

    fn value_at(&mut self, depth: usize) -> Result<(usize, usize), JsonError> {
        let start = match self.peek() {
            Some(_) => self.i,
            None => return self.err("expected a value"),
        };
        match self.b.get(self.i).copied() {
            Some(b'"') => {
                self.string()?;
            }
            Some(b'{') => {
                if depth >= MAX_DEPTH {
                    return self.err("recursion limit exceeded");
                }
                self.i += 1;
                if self.peek() == Some(b'}') {
                    self.i += 1;
                } else {
                    loop {
                        self.string()?;
                        self.expect(b':', "expected `:`")?;
                        self.value_at(depth + 1)?;
                        if !self.next_member(b'}')? {
                            break;
                        }
                    }
                }
            }
            Some(b'[') => {
                if depth >= MAX_DEPTH {
                    return self.err("recursion limit exceeded");
                }
                self.i += 1;
                if self.peek() == Some(b']') {
                    self.i += 1;
                } else {
                    loop {
                        self.value_at(depth + 1)?;
                        if !self.next_member(b']')? {
                            break;
                        }
                    }
                }
            }
            Some(b't') => self.literal(b"true")?,
            Some(b'f') => self.literal(b"false")?,
            Some(b'n') => self.literal(b"null")?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            _ => return self.err("expected a value"),
        }
        Ok((start, self.i))
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), JsonError> {
        if self.b.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Ok(())
        } else {
            self.err("invalid literal")
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<(), JsonError> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return self.err("invalid number"),
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return self.err("invalid number");
            }
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return self.err("invalid number");
            }
        }
        Ok(())
    }
}

/// How many bytes of a string are looked at one by one before a SIMD search takes over.
const SHORT: usize = 32;

/// Bytes that end the plain run of a string or need a closer look: the quote, the
/// backslash, control characters and non-ASCII bytes.
static SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = i < 0x20 || i >= 0x80 || i == b'"' as usize || i == b'\\' as usize;
        i += 1;
    }
    t
};

/// The text of a validated string's raw content (as [`Validator::string`] returns it) with
/// its escapes resolved. Escapes are rare in Kubernetes names, so `serde_json` does it.
///
/// # Errors
/// When `raw` is not the content of a valid JSON string.
pub fn unescape(raw: &[u8]) -> Result<String, serde_json::Error> {
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    serde_json::from_slice(&quoted)
}

/// A word with the high bit set in each byte that is special inside a string (as
/// [`SPECIAL`] says: a quote, a backslash, a control character or a non-ASCII byte), read
/// little-endian. Bytes above the first special one may be marked wrongly (borrows carry
/// upwards), so only the lowest marked byte is meaningful.
#[inline]
fn special_bytes(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte below 0x20 borrows, and so sets its high bit, when 0x20 is subtracted.
    let control = x.wrapping_sub(0x20 * ONES);
    // Zero bytes of `x ^ c` are the bytes equal to `c`.
    let q = x ^ (u64::from(b'"') * ONES);
    let quote = q.wrapping_sub(ONES) & !q;
    let b = x ^ (u64::from(b'\\') * ONES);
    let backslash = b.wrapping_sub(ONES) & !b;
    // `x` itself marks the non-ASCII bytes.
    (control | quote | backslash | x) & HIGH
}

/// Checks the unescaped run of a string: no control characters, and UTF-8 where it is not
/// plain ASCII. One pass computes both the smallest and the largest byte (vectorised), so
/// the common all-ASCII run costs a single sweep.
#[inline]
fn check_plain(run: &[u8]) -> Result<(), &'static str> {
    let (lo, hi) = run
        .iter()
        .fold((u8::MAX, 0u8), |(lo, hi), &b| (lo.min(b), hi.max(b)));
    if lo < 0x20 {
        return Err("control character in a string");
    }
    if hi >= 0x80 && std::str::from_utf8(run).is_err() {
        return Err("invalid UTF-8 in a string");
    }
    Ok(())
}

/// Validates that `b` is exactly one JSON value (with optional surrounding whitespace).
///
/// # Errors
/// What is wrong and where.
pub fn validate(b: &[u8]) -> Result<(), JsonError> {
    let mut v = Validator::new(b);
    v.value()?;
    v.end()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde_ok(b: &[u8]) -> bool {
        serde_json::from_slice::<serde_json::Value>(b).is_ok()
    }

    #[test]
    fn accepts_and_refuses_what_json_does() {
        for ok in [
            &br#"{"a":[1,-2.5e+3,0,true,false,null,"x\u00e9\n\"",{}],"b":{"c":[]}}"#[..],
            b" 0 ",
            b"\"\\ud83d\\ude00\"",
            "\"caf\u{e9} \u{1F600}\"".as_bytes(),
            b"-0.0E-0",
        ] {
            assert!(validate(ok).is_ok(), "{}", String::from_utf8_lossy(ok));
            assert!(serde_ok(ok));
        }
        for bad in [
            &b""[..],
            b"{",
            b"{\"a\"}",
            b"{\"a\":1,}",
            b"[1,]",
            b"01",
            b"1.",
            b"1e",
            b"-",
            b"tru",
            b"\"\x01\"",
            b"\"\\x\"",
            b"\"\\u12g4\"",
            b"\"\\ud800\"",
            b"\"\\udc00\"",
            b"\"\xff\"",
            b"{} {}",
            b"{'a':1}",
            b"[\"unterminated",
        ] {
            assert!(validate(bad).is_err(), "{}", String::from_utf8_lossy(bad));
            assert!(!serde_ok(bad));
        }
        let deep_ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(validate(deep_ok.as_bytes()).is_ok());
        let too_deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        assert_eq!(
            validate(too_deep.as_bytes()).unwrap_err().what,
            "recursion limit exceeded"
        );
        assert!(!serde_ok(too_deep.as_bytes()));
    }

    #[test]
    fn value_spans_are_exact() {
        let text = br#"{"type":"ADDED","object":{"k":[1,2]} }"#;
        let mut v = Validator::new(text);
        v.expect(b'{', "").unwrap();
        assert_eq!(v.string().unwrap(), (&b"type"[..], false));
        v.expect(b':', "").unwrap();
        let (s, e) = v.value().unwrap();
        assert_eq!(&text[s..e], b"\"ADDED\"");
        assert!(v.next_member(b'}').unwrap());
        v.string().unwrap();
        v.expect(b':', "").unwrap();
        let (s, e) = v.value().unwrap();
        assert_eq!(&text[s..e], br#"{"k":[1,2]}"#);
        assert!(!v.next_member(b'}').unwrap());
        v.end().unwrap();
    }

    /// JSON-ish text built from the pieces that matter, so that most cases are near-valid.
    fn jsonish() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(&b"{"[..]),
            Just(&b"}"[..]),
            Just(&b"["[..]),
            Just(&b"]"[..]),
            Just(&b","[..]),
            Just(&b":"[..]),
            Just(&b"\""[..]),
            Just(&b"\"k\""[..]),
            Just(&b"\\"[..]),
            Just(&b"\\u00e9"[..]),
            Just(&b"\\ud83d\\ude00"[..]),
            Just(&b"n"[..]),
            Just(&b"null"[..]),
            Just(&b"true"[..]),
            Just(&b"-"[..]),
            Just(&b"0"[..]),
            Just(&b"12"[..]),
            Just(&b".5"[..]),
            // Exponents end at once: `serde_json` refuses numbers beyond f64's range, which JSON
            // itself allows (and this validator accepts, as `serde_json` does when it only
            // skips a value).
            Just(&b"e+5,"[..]),
            Just(&b"E-1]"[..]),
            Just(&b" "[..]),
            Just(&b"\x01"[..]),
            Just("é".as_bytes()),
            Just(&b"\xc3"[..]),
            Just(&b"\xff"[..]),
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|ps| ps.concat())
    }

    proptest! {
        #[test]
        fn special_bytes_marks_the_first_special_byte(word in proptest::arbitrary::any::<[u8; 8]>()) {
            let first = word.iter().position(|&b| SPECIAL[usize::from(b)]);
            let marks = special_bytes(u64::from_le_bytes(word));
            prop_assert_eq!(first, (marks != 0).then(|| (marks.trailing_zeros() / 8) as usize));
        }

        #[test]
        fn long_plain_strings_with_one_odd_byte(
            len in 0usize..80,
            at in 0usize..80,
            odd in proptest::arbitrary::any::<u8>(),
        ) {
            let mut text = vec![b'"'];
            text.extend((0..len).map(|i| b'a' + (i % 26) as u8));
            if at < len {
                text[1 + at] = odd;
            }
            text.push(b'"');
            prop_assert_eq!(validate(&text).is_ok(), serde_ok(&text), "{}", String::from_utf8_lossy(&text));
        }

        #[test]
        fn agrees_with_serde_json(text in jsonish()) {
            prop_assert_eq!(validate(&text).is_ok(), serde_ok(&text), "{}", String::from_utf8_lossy(&text));
        }

        #[test]
        fn agrees_with_serde_json_on_mutated_objects(
            value in proptest::arbitrary::any::<u8>(),
            at in 0usize..200,
        ) {
            let base = br#"{"metadata":{"name":"a","labels":{"x":"y\n"}},"spec":{"n":[1,2.5,-3e2,true,null],"s":"caf\u00e9"}}"#;
            let mut text = base.to_vec();
            let at = at % text.len();
            text[at] = value;
            prop_assert_eq!(validate(&text).is_ok(), serde_ok(&text), "{}", String::from_utf8_lossy(&text));
            text.remove(at);
            prop_assert_eq!(validate(&text).is_ok(), serde_ok(&text), "{}", String::from_utf8_lossy(&text));
        }

        /// On what serde_json writes, stepping over an object by its braces and strings
        /// finds the span validating finds, followed by whatever comes after it.
        #[test]
        fn skipping_a_trusted_object_finds_the_validated_span(
            value in json_value(),
            after in "[ ,}\\]]{0,3}",
        ) {
            let object = serde_json::Value::Object(
                [("k".to_string(), value.clone()), ("{\"}".to_string(), value)]
                    .into_iter()
                    .collect(),
            );
            let text = format!(" {object}{after}");
            let mut trusted = Validator::new(text.as_bytes());
            let mut checked = Validator::new(text.as_bytes());
            prop_assert_eq!(trusted.skip_trusted_object(), checked.value().ok());
            prop_assert_eq!(trusted.pos(), checked.pos());
        }
    }

    /// JSON values with strings full of what a brace counter could trip on.
    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<i64>().prop_map(serde_json::Value::from),
            "[{}\\[\\]\"\\\\a\n\u{e9}]{0,6}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[{}\"a]{0,3}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn a_trusted_skip_refuses_what_is_not_a_closed_object() {
        for text in [
            &b"[1]"[..],
            b"\"{\"",
            b"{\"a\":1",
            b"{\"a\":\"}\\\"}",
            b"",
            b"  ",
        ] {
            let mut v = Validator::new(text);
            assert_eq!(
                v.skip_trusted_object(),
                None,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }
}
