//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`) at the wire level:
//! the `k8s\0` envelope, varints, and fields as (number, value) pairs, without generated
//! message types. This is the one copy of these codecs; the client reads messages with it
//! and the server reads and writes with it.
//!
//! The client reads only what its caches and the watch protocol need — the `k8s\0`
//! envelope (`runtime.Unknown`), watch events, list metadata, an object's metadata and
//! `Status` — so it walks the messages itself rather than decoding whole objects. A field
//! that is not read is passed over by its length, which is what makes this encoding cheap
//! to receive: the bytes of a pod's spec are never looked at.
//!
//! Wire facts (protobuf encoding): each field is a varint key `number << 3 | wire type`,
//! then a varint (type 0), 8 bytes (1), a varint length and that many bytes (2), or 4 bytes
//! (5). Groups (3, 4) are not used by Kubernetes and are refused. Of a non-repeated field
//! given twice the last one counts. Varints are LEB128: seven bits a byte, low bits first,
//! the top bit set on every byte but the last, at most ten bytes for a `u64`.

use std::fmt;

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8] = b"k8s\0";

/// Why bytes are not the protobuf expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid protobuf: {what} at byte {at}")]
pub struct WireError {
    /// What was wrong.
    pub what: &'static str,
    /// The offset in the message where it was found.
    pub at: usize,
}

fn fail<T>(what: &'static str, at: usize) -> Result<T, WireError> {
    Err(WireError { what, at })
}

/// One field's value, borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0: an integer, bool or enum.
    Varint(u64),
    /// Wire type 1: eight little-endian bytes.
    Fixed64(u64),
    /// Wire type 2: a string, bytes, an embedded message or a packed repeated field.
    Bytes(&'a [u8]),
    /// Wire type 5: four little-endian bytes.
    Fixed32(u32),
}

impl<'a> Value<'a> {
    /// The bytes of a length-delimited field, or an error naming `what` was expected.
    pub fn bytes(self, what: &'static str, at: usize) -> Result<&'a [u8], WireError> {
        match self {
            Value::Bytes(b) => Ok(b),
            _ => fail(what, at),
        }
    }

    /// A length-delimited field as UTF-8 text (protobuf strings must be UTF-8).
    pub fn string(self, at: usize) -> Result<&'a str, WireError> {
        let b = self.bytes("expected a string", at)?;
        std::str::from_utf8(b).or_else(|_| fail("invalid UTF-8 in a string", at))
    }

    /// A length-delimited field checked to be UTF-8 text, as its bytes: for a caller that
    /// keeps where the text lies rather than the text. ASCII, which names, uids and
    /// resourceVersions are, is checked first: for such short strings that takes about half
    /// the time of a full UTF-8 check (a microbenchmark in BENCHMARKS.md, session 19).
    pub fn text(self, at: usize) -> Result<&'a [u8], WireError> {
        let b = self.bytes("expected a string", at)?;
        if b.is_ascii() || std::str::from_utf8(b).is_ok() {
            Ok(b)
        } else {
            fail("invalid UTF-8 in a string", at)
        }
    }

    /// A varint field.
    pub fn varint(self, at: usize) -> Result<u64, WireError> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => fail("expected a varint", at),
        }
    }
}

/// Reads a varint at `*pos`, advancing it.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    // Field keys and short lengths are one byte: most varints end here.
    if let Some(&byte) = buf.get(*pos) {
        if byte < 0x80 {
            *pos += 1;
            return Ok(u64::from(byte));
        }
    }
    let start = *pos;
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&byte) = buf.get(*pos) else {
            return fail("truncated varint", start);
        };
        *pos += 1;
        // The tenth byte may only carry the top bit of a u64.
        if shift == 63 && byte > 1 {
            return fail("varint overflows 64 bits", start);
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    fail("varint longer than 10 bytes", start)
}

/// Appends `v` as a varint (LEB128, the shortest form: one to ten bytes).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        // Truncation is the point: the low seven bits, with the continuation bit set.
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends the key of field `number` with wire type `wire_type` (0, 1, 2 or 5).
pub fn put_key(out: &mut Vec<u8>, number: u32, wire_type: u8) {
    put_varint(out, (u64::from(number) << 3) | u64::from(wire_type));
}

/// Appends field `number` as a length-delimited field (wire type 2) holding `bytes`.
pub fn put_delimited(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_key(out, number, 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The fields of one message, in wire order. Yields `(offset, number, value)`; after an
/// error it yields nothing more.
#[derive(Clone)]
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Added to offsets in errors, so they point into the enclosing buffer.
    base: usize,
    failed: bool,
}

impl fmt::Debug for Fields<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fields")
            .field("len", &self.buf.len())
            .field("pos", &self.pos)
            .finish()
    }
}

/// Iterates over the fields of `message`.
pub fn fields(message: &[u8]) -> Fields<'_> {
    Fields {
        buf: message,
        pos: 0,
        base: 0,
        failed: false,
    }
}

/// Iterates over the fields of `message`, which lies at offset `base` of an enclosing buffer
/// (for error offsets).
pub fn fields_at(message: &[u8], base: usize) -> Fields<'_> {
    Fields {
        buf: message,
        pos: 0,
        base,
        failed: false,
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(usize, u32, Value<'a>), WireError> {
        let at = self.base + self.pos;
        let key = read_varint(self.buf, &mut self.pos).map_err(|e| WireError {
            at: self.base + e.at,
            ..e
        })?;
        let number = u32::try_from(key >> 3).or_else(|_| fail("field number too large", at))?;
        if number == 0 {
            return fail("field number 0", at);
        }
        let value = match key & 7 {
            0 => Value::Varint(read_varint(self.buf, &mut self.pos).map_err(|e| WireError {
                at: self.base + e.at,
                ..e
            })?),
            1 => Value::Fixed64(u64::from_le_bytes(self.take::<8>(at)?)),
            2 => {
                let len = read_varint(self.buf, &mut self.pos).map_err(|e| WireError {
                    at: self.base + e.at,
                    ..e
                })?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|len| self.pos.checked_add(len))
                    .filter(|&end| end <= self.buf.len());
                let Some(end) = end else {
                    return fail("length past the end of the message", at);
                };
                let bytes = self.buf.get(self.pos..end).unwrap_or_default();
                self.pos = end;
                Value::Bytes(bytes)
            }
            5 => Value::Fixed32(u32::from_le_bytes(self.take::<4>(at)?)),
            _ => return fail("unsupported wire type", at),
        };
        Ok((at, number, value))
    }

    fn take<const N: usize>(&mut self, at: usize) -> Result<[u8; N], WireError> {
        let bytes = self
            .buf
            .get(self.pos..self.pos + N)
            .and_then(|b| <[u8; N]>::try_from(b).ok());
        match bytes {
            Some(b) => {
                self.pos += N;
                Ok(b)
            }
            None => fail("truncated fixed-width field", at),
        }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(usize, u32, Value<'a>), WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let field = self.field();
        self.failed = field.is_err();
        Some(field)
    }
}

/// The parts of a `runtime.Unknown` envelope (`k8s\0` stripped) the client uses.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// `typeMeta.apiVersion`.
    pub api_version: &'a str,
    /// `typeMeta.kind`.
    pub kind: &'a str,
    /// The object's own message.
    pub raw: &'a [u8],
}

/// Unwraps a complete protobuf body: `k8s\0`, then a `runtime.Unknown` whose `raw` is the
/// object's message. A body with a content encoding (none is defined for these bodies) is
/// refused.
pub fn envelope(body: &[u8]) -> Result<Envelope<'_>, WireError> {
    let Some(unknown) = body.strip_prefix(MAGIC) else {
        return fail("missing the k8s\\0 prefix", 0);
    };
    let mut out = Envelope::default();
    for field in fields_at(unknown, MAGIC.len()) {
        let (at, number, value) = field?;
        match number {
            1 => {
                for field in fields_at(value.bytes("expected typeMeta", at)?, at) {
                    let (at, number, value) = field?;
                    match number {
                        1 => out.api_version = value.string(at)?,
                        2 => out.kind = value.string(at)?,
                        _ => {}
                    }
                }
            }
            2 => out.raw = value.bytes("expected raw bytes", at)?,
            3 if !value.string(at)?.is_empty() => {
                return fail("content encodings are not supported", at)
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
        put_delimited(out, number, bytes);
    }

    #[test]
    fn reads_every_wire_type() {
        let mut m = Vec::new();
        put_varint(&mut m, 1 << 3);
        put_varint(&mut m, 300);
        put_varint(&mut m, 2 << 3 | 1);
        m.extend_from_slice(&7u64.to_le_bytes());
        put_bytes(&mut m, 3, b"hi");
        put_varint(&mut m, 4 << 3 | 5);
        m.extend_from_slice(&9u32.to_le_bytes());
        let got: Vec<_> = fields(&m)
            .map(|f| f.unwrap())
            .map(|(_, n, v)| (n, v))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, Value::Varint(300)),
                (2, Value::Fixed64(7)),
                (3, Value::Bytes(b"hi")),
                (4, Value::Fixed32(9)),
            ]
        );
    }

    #[test]
    fn refuses_truncation_groups_and_overlong_varints() {
        let mut m = Vec::new();
        put_bytes(&mut m, 1, b"hello");
        for cut in 1..m.len() {
            let r: Result<Vec<_>, _> = fields(&m[..cut]).collect();
            assert!(r.is_err(), "cut at {cut} must fail");
        }
        let group = [1 << 3 | 3];
        assert_eq!(
            fields(&group).next().unwrap().unwrap_err().what,
            "unsupported wire type"
        );
        let long = [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        ];
        assert!(fields(&long).next().unwrap().is_err());
        assert!(fields(&[0x00, 0x01]).next().unwrap().is_err(), "field 0");
    }

    #[test]
    fn read_varint_refuses_overflow_and_eleven_bytes() {
        let mut pos = 0;
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read_varint(&max, &mut pos), Ok(u64::MAX));
        let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        let mut pos = 0;
        assert!(read_varint(&over, &mut pos).is_err());
        let eleven = [
            0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00,
        ];
        let mut pos = 0;
        assert!(read_varint(&eleven, &mut pos).is_err());
        let mut pos = 0;
        assert!(read_varint(&[], &mut pos).is_err());
    }

    #[test]
    fn envelope_unwraps_type_and_raw() {
        let mut tm = Vec::new();
        put_bytes(&mut tm, 1, b"v1");
        put_bytes(&mut tm, 2, b"Pod");
        let mut unknown = MAGIC.to_vec();
        put_bytes(&mut unknown, 1, &tm);
        put_bytes(&mut unknown, 2, b"\x0a\x00");
        put_bytes(&mut unknown, 4, b"");
        let e = envelope(&unknown).unwrap();
        assert_eq!(
            (e.api_version, e.kind, e.raw),
            ("v1", "Pod", &b"\x0a\x00"[..])
        );
        assert!(envelope(b"{\"kind\":\"Pod\"}").is_err());
        let mut gz = unknown.clone();
        put_bytes(&mut gz, 3, b"gzip");
        assert!(envelope(&gz).is_err());
    }

    proptest! {
        /// Any sequence of fields written is read back as written.
        #[test]
        fn fields_round_trip(spec in proptest::collection::vec(
            (1u32..1000, prop_oneof![
                any::<u64>().prop_map(|v| (0u8, v, Vec::new())),
                any::<u64>().prop_map(|v| (1u8, v, Vec::new())),
                proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| (2u8, 0, b)),
                any::<u32>().prop_map(|v| (5u8, u64::from(v), Vec::new())),
            ]),
            0..20,
        )) {
            let mut m = Vec::new();
            for (n, (t, v, b)) in &spec {
                put_varint(&mut m, u64::from(*n) << 3 | u64::from(*t));
                match t {
                    0 => put_varint(&mut m, *v),
                    1 => m.extend_from_slice(&v.to_le_bytes()),
                    2 => { put_varint(&mut m, b.len() as u64); m.extend_from_slice(b); }
                    _ => m.extend_from_slice(&(*v as u32).to_le_bytes()),
                }
            }
            let got: Vec<_> = fields(&m).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got.len(), spec.len());
            for ((_, n, v), (sn, (t, sv, sb))) in got.iter().zip(&spec) {
                prop_assert_eq!(n, sn);
                let want = match t {
                    0 => Value::Varint(*sv),
                    1 => Value::Fixed64(*sv),
                    2 => Value::Bytes(sb),
                    _ => Value::Fixed32(*sv as u32),
                };
                prop_assert_eq!(*v, want);
            }
        }

        /// A varint written is read back whole, and any cut of it is an error.
        #[test]
        fn varint_round_trips_and_truncation_is_an_error(v in any::<u64>(), tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            let len = buf.len();
            prop_assert!((1..=10).contains(&len));
            buf.extend_from_slice(&tail);
            let mut pos = 0;
            prop_assert_eq!(read_varint(&buf, &mut pos), Ok(v));
            prop_assert_eq!(pos, len);
            for cut in 0..len {
                let mut pos = 0;
                prop_assert!(read_varint(&buf[..cut], &mut pos).is_err(), "cut at {}", cut);
            }
        }

        /// Arbitrary bytes never panic the reader.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = fields(&bytes).count();
            let _ = envelope(&bytes);
        }
    }
}
