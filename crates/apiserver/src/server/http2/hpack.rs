//! HPACK (RFC 7541): decoding the header blocks clients send, and the two encodings the server
//! uses for its responses.
//!
//! The decoder keeps one connection's dynamic table between blocks and supports every field
//! representation, table size updates and Huffman-coded strings. Responses are encoded as
//! literals without indexing and without Huffman coding: valid for any decoder, and the server
//! keeps no encoder state. Nothing here panics on any input; lengths and integers are bounded
//! before anything is allocated.

use std::collections::VecDeque;
use std::sync::OnceLock;

/// Why a header block does not decode (a COMPRESSION_ERROR for the connection).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// The block ended inside a field.
    #[error("header block truncated")]
    Truncated,
    /// An integer does not fit the bounds this decoder accepts.
    #[error("integer overflow")]
    IntegerOverflow,
    /// An index of 0, or past the static and dynamic tables.
    #[error("invalid table index {0}")]
    BadIndex(usize),
    /// A dynamic table size update above the advertised limit, or not at the block's start.
    #[error("invalid dynamic table size update")]
    BadSizeUpdate,
    /// A Huffman-coded string with the EOS symbol or invalid padding.
    #[error("invalid Huffman code")]
    BadHuffman,
    /// The decoded header list is larger than allowed.
    #[error("header list too large")]
    HeaderListTooLarge,
}

/// The static table (RFC 7541 Appendix A), index 1 first.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Huffman code lengths in bits of symbols 0..=256 (256 is EOS), RFC 7541 Appendix B. The
/// code is canonical: codes are assigned in order of (length, symbol), so the lengths alone
/// determine it.
const HUFFMAN_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

const EOS: u16 = 256;
const MAX_CODE_LEN: usize = 30;

/// The canonical decoding tables: per code length, the first code of that length, how many
/// codes have it, and where its symbols start in `symbols` (sorted by length, then symbol).
struct Canonical {
    first: [u32; MAX_CODE_LEN + 1],
    count: [u32; MAX_CODE_LEN + 1],
    offset: [u32; MAX_CODE_LEN + 1],
    symbols: Vec<u16>,
}

fn canonical() -> &'static Canonical {
    static TABLE: OnceLock<Canonical> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut symbols: Vec<u16> = (0..=EOS).collect();
        symbols.sort_by_key(|&s| (HUFFMAN_LENGTHS[usize::from(s)], s));
        let mut c = Canonical {
            first: [0; MAX_CODE_LEN + 1],
            count: [0; MAX_CODE_LEN + 1],
            offset: [0; MAX_CODE_LEN + 1],
            symbols,
        };
        for &l in &HUFFMAN_LENGTHS {
            c.count[usize::from(l)] += 1;
        }
        let (mut code, mut offset) = (0u32, 0u32);
        for len in 1..=MAX_CODE_LEN {
            code = (code + c.count[len - 1]) << 1;
            c.first[len] = code;
            c.offset[len] = offset;
            offset += c.count[len];
        }
        c
    })
}

/// Decodes a Huffman-coded string (RFC 7541 §5.2) into `out`.
fn huffman_decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let t = canonical();
    let (mut code, mut len) = (0u32, 0usize);
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            let rel = code.wrapping_sub(t.first[len]);
            if code >= t.first[len] && rel < t.count[len] {
                let idx = (t.offset[len] + rel) as usize;
                let sym = *t.symbols.get(idx).ok_or(HpackError::BadHuffman)?;
                if sym == EOS {
                    return Err(HpackError::BadHuffman);
                }
                out.push(sym as u8);
                code = 0;
                len = 0;
            } else if len >= MAX_CODE_LEN {
                return Err(HpackError::BadHuffman);
            }
        }
    }
    // What is left must be a prefix of EOS (all ones) shorter than a byte.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HpackError::BadHuffman);
    }
    Ok(())
}

/// Reads an integer with an `prefix`-bit prefix (RFC 7541 §5.1) from `b[*pos..]`.
fn read_int(b: &[u8], pos: &mut usize, prefix: u8) -> Result<usize, HpackError> {
    let max_prefix = (1usize << prefix) - 1;
    let first = *b.get(*pos).ok_or(HpackError::Truncated)?;
    *pos += 1;
    let mut value = usize::from(first) & max_prefix;
    if value < max_prefix {
        return Ok(value);
    }
    let mut shift = 0u32;
    loop {
        let byte = *b.get(*pos).ok_or(HpackError::Truncated)?;
        *pos += 1;
        // Four continuation bytes reach 2^28 more than any bound used here.
        if shift > 21 {
            return Err(HpackError::IntegerOverflow);
        }
        value += usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// Reads a string literal (RFC 7541 §5.2) into `out` (cleared first).
fn read_string(b: &[u8], pos: &mut usize, out: &mut Vec<u8>) -> Result<(), HpackError> {
    let huffman = b.get(*pos).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = read_int(b, pos, 7)?;
    let end = pos.checked_add(len).ok_or(HpackError::Truncated)?;
    let raw = b.get(*pos..end).ok_or(HpackError::Truncated)?;
    *pos = end;
    out.clear();
    if huffman {
        huffman_decode(raw, out)
    } else {
        out.extend_from_slice(raw);
        Ok(())
    }
}

/// Decodes header blocks of one connection, keeping the dynamic table between blocks.
#[derive(Debug)]
pub struct Decoder {
    /// Newest entry first.
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max_size: usize,
    limit: usize,
    max_list: usize,
}

impl Decoder {
    /// A decoder whose peer may use a dynamic table of up to `max_table_size` bytes (the
    /// SETTINGS_HEADER_TABLE_SIZE we advertised) and send header lists of up to
    /// `max_list_size` bytes (each field counted as name + value + 32).
    pub fn new(max_table_size: usize, max_list_size: usize) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: max_table_size,
            limit: max_table_size,
            max_list: max_list_size,
        }
    }

    /// The dynamic table's current size in RFC 7541 terms.
    pub fn table_size(&self) -> usize {
        self.size
    }

    /// Decodes one complete header block, calling `emit(name, value)` for each field in
    /// order. After an error the connection must be closed (the table may be out of step).
    pub fn decode(
        &mut self,
        block: &[u8],
        mut emit: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut pos = 0;
        let mut list = 0usize;
        let mut fields_seen = false;
        let (mut name, mut value) = (Vec::new(), Vec::new());
        while let Some(&b) = block.get(pos) {
            if b & 0x80 != 0 {
                // Indexed field.
                let idx = read_int(block, &mut pos, 7)?;
                let (n, v) = self.entry(idx)?;
                list += n.len() + v.len() + 32;
                if list > self.max_list {
                    return Err(HpackError::HeaderListTooLarge);
                }
                emit(n, v);
                fields_seen = true;
                continue;
            }
            if b & 0xe0 == 0x20 {
                // Dynamic table size update: only before the block's first field.
                if fields_seen {
                    return Err(HpackError::BadSizeUpdate);
                }
                let size = read_int(block, &mut pos, 5)?;
                if size > self.limit {
                    return Err(HpackError::BadSizeUpdate);
                }
                self.max_size = size;
                self.evict(0);
                continue;
            }
            // Literal: with incremental indexing (01), without (0000) or never indexed (0001).
            let (prefix, index) = if b & 0xc0 == 0x40 {
                (6, true)
            } else {
                (4, false)
            };
            let idx = read_int(block, &mut pos, prefix)?;
            if idx == 0 {
                read_string(block, &mut pos, &mut name)?;
            } else {
                let (n, _) = self.entry(idx)?;
                name.clear();
                name.extend_from_slice(n);
            }
            read_string(block, &mut pos, &mut value)?;
            list += name.len() + value.len() + 32;
            if list > self.max_list {
                return Err(HpackError::HeaderListTooLarge);
            }
            emit(&name, &value);
            fields_seen = true;
            if index {
                self.insert(name.clone(), value.clone());
            }
        }
        Ok(())
    }

    fn entry(&self, idx: usize) -> Result<(&[u8], &[u8]), HpackError> {
        if idx == 0 {
            return Err(HpackError::BadIndex(idx));
        }
        if let Some((n, v)) = STATIC.get(idx - 1) {
            return Ok((n.as_bytes(), v.as_bytes()));
        }
        self.table
            .get(idx - 1 - STATIC.len())
            .map(|(n, v)| (n.as_slice(), v.as_slice()))
            .ok_or(HpackError::BadIndex(idx))
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + 32;
        if size > self.max_size {
            // Larger than the whole table: it empties the table and is not kept (§4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.table.push_front((name, value));
    }

    /// Drops the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            let Some((n, v)) = self.table.pop_back() else {
                self.size = 0;
                return;
            };
            self.size -= n.len() + v.len() + 32;
        }
    }
}

fn write_int(value: usize, prefix: u8, first: u8, out: &mut Vec<u8>) {
    let max_prefix = (1usize << prefix) - 1;
    if value < max_prefix {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max_prefix as u8);
    let mut rest = value - max_prefix;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

fn write_string(s: &[u8], out: &mut Vec<u8>) {
    write_int(s.len(), 7, 0, out);
    out.extend_from_slice(s);
}

/// Appends a field as a literal without indexing with a new name, not Huffman-coded.
pub fn encode_literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    write_string(name, out);
    write_string(value, out);
}

/// Appends `:status` for `code`: the static table's entry where there is one (200, 204, 206,
/// 304, 400, 404, 500), a literal with the indexed name otherwise.
pub fn encode_status(code: u16, out: &mut Vec<u8>) {
    let idx = match code {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => {
            write_int(8, 4, 0, out);
            write_string(code.to_string().as_bytes(), out);
            return;
        }
    };
    out.push(0x80 | idx);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn decode(d: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
        let mut v = Vec::new();
        d.decode(block, |n, val| {
            v.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(val.to_vec()).unwrap(),
            ))
        })
        .unwrap();
        v
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// A test encoder: the canonical Huffman code from the lengths.
    fn huffman_encode(s: &[u8]) -> Vec<u8> {
        let t = canonical();
        let code_of = |sym: u16| {
            let len = usize::from(HUFFMAN_LENGTHS[usize::from(sym)]);
            let pos = t.symbols[t.offset[len] as usize..(t.offset[len] + t.count[len]) as usize]
                .iter()
                .position(|&x| x == sym)
                .unwrap();
            (t.first[len] + pos as u32, len)
        };
        let (mut acc, mut bits, mut out) = (0u64, 0usize, Vec::new());
        for &b in s {
            let (c, l) = code_of(u16::from(b));
            acc = (acc << l) | u64::from(c);
            bits += l;
            while bits >= 8 {
                out.push((acc >> (bits - 8)) as u8);
                bits -= 8;
            }
        }
        if bits > 0 {
            out.push(((acc << (8 - bits)) as u8) | ((1u8 << (8 - bits)) - 1));
        }
        out
    }

    #[test]
    fn the_code_is_the_rfc_one() {
        // Spot checks against RFC 7541 Appendix B: '0' = 00000 (5), 'a' = 00011 (5),
        // ' ' = 010100 (6), 'z' = 1111011 (7), EOS = 30 ones.
        let t = canonical();
        let find = |sym: u16| {
            let len = usize::from(HUFFMAN_LENGTHS[usize::from(sym)]);
            let pos = t.symbols[t.offset[len] as usize..]
                .iter()
                .position(|&x| x == sym)
                .unwrap();
            t.first[len] + pos as u32
        };
        assert_eq!(find(u16::from(b'0')), 0b00000);
        assert_eq!(find(u16::from(b'a')), 0b00011);
        assert_eq!(find(u16::from(b' ')), 0b010100);
        assert_eq!(find(u16::from(b'z')), 0b1111011);
        assert_eq!(find(EOS), 0x3fff_ffff);
    }

    #[test]
    fn rfc_c2_literals_and_indexed() {
        let mut d = Decoder::new(4096, 1 << 16);
        // C.2.1: literal with indexing, new name.
        let b = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
        assert_eq!(
            decode(&mut d, &b),
            pairs(&[("custom-key", "custom-header")])
        );
        assert_eq!(d.table_size(), 55);
        // C.2.2: literal without indexing, indexed name.
        let b = hex("040c 2f73 616d 706c 652f 7061 7468");
        assert_eq!(decode(&mut d, &b), pairs(&[(":path", "/sample/path")]));
        // C.2.3: never indexed.
        let b = hex("1008 7061 7373 776f 7264 0673 6563 7265 74");
        assert_eq!(decode(&mut d, &b), pairs(&[("password", "secret")]));
        assert_eq!(d.table_size(), 55);
        // C.2.4: indexed.
        assert_eq!(decode(&mut d, &hex("82")), pairs(&[(":method", "GET")]));
    }

    #[test]
    fn rfc_c4_requests_with_huffman() {
        let mut d = Decoder::new(4096, 1 << 16);
        let b = hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff");
        assert_eq!(
            decode(&mut d, &b),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.table_size(), 57);
        let b = hex("8286 84be 5886 a8eb 1064 9cbf");
        assert_eq!(
            decode(&mut d, &b),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        assert_eq!(d.table_size(), 110);
        let b = hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
        assert_eq!(
            decode(&mut d, &b),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(d.table_size(), 164);
    }

    #[test]
    fn eviction_keeps_the_table_within_its_size() {
        // Table of 256 bytes as in RFC 7541 C.5: each entry below is 32 + 10 + 90 = 132.
        let mut d = Decoder::new(256, 1 << 16);
        let mut block = Vec::new();
        for i in 0..3 {
            block.push(0x40);
            write_string(format!("name-{i:05}").as_bytes(), &mut block);
            write_string(&[b'v'; 90], &mut block);
        }
        assert_eq!(decode(&mut d, &block).len(), 3);
        assert_eq!(d.table_size(), 132, "only the newest entry fits");
        // Index 62 is the newest dynamic entry.
        let got = decode(&mut d, &[0x80 | 62]);
        assert_eq!(got[0].0, "name-00002");
        assert!(d.decode(&[0x80 | 63], |_, _| {}).is_err());
        // A size update to 0 empties it; above the limit is refused; after a field too.
        decode(&mut d, &[0x20]);
        assert_eq!(d.table_size(), 0);
        assert_eq!(
            d.decode(&hex("3fe2 1f"), |_, _| {}),
            Err(HpackError::BadSizeUpdate)
        );
        assert_eq!(
            d.decode(&[0x82, 0x20], |_, _| {}),
            Err(HpackError::BadSizeUpdate)
        );
    }

    #[test]
    fn bad_input_is_an_error() {
        let mut d = Decoder::new(4096, 100);
        assert_eq!(d.decode(&[0x80], |_, _| {}), Err(HpackError::BadIndex(0)));
        assert_eq!(
            d.decode(&[0xff, 0x00], |_, _| {}),
            Err(HpackError::BadIndex(127))
        );
        assert_eq!(
            d.decode(&[0x00, 0x05, b'a'], |_, _| {}),
            Err(HpackError::Truncated)
        );
        assert_eq!(
            d.decode(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], |_, _| {}),
            Err(HpackError::IntegerOverflow)
        );
        // Huffman: EOS inside, padding of zeros, padding longer than 7 bits.
        assert!(huffman_decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()).is_err());
        assert!(huffman_decode(&[0x00], &mut Vec::new()).is_err());
        assert!(huffman_decode(&[0x1f, 0xff], &mut Vec::new()).is_err());
        // Over the list size.
        let mut big = Vec::new();
        encode_literal(b"x", &[b'y'; 80], &mut big);
        assert_eq!(
            d.decode(&big, |_, _| {}),
            Err(HpackError::HeaderListTooLarge)
        );
    }

    #[test]
    fn server_encodings_decode_back() {
        let mut block = Vec::new();
        encode_status(200, &mut block);
        encode_status(201, &mut block);
        encode_literal(b"content-type", b"application/json", &mut block);
        encode_literal(b"x-long", &[b'z'; 300], &mut block);
        let mut d = Decoder::new(4096, 1 << 16);
        let got = decode(&mut d, &block);
        assert_eq!(got[0], (":status".into(), "200".into()));
        assert_eq!(got[1], (":status".into(), "201".into()));
        assert_eq!(got[2], ("content-type".into(), "application/json".into()));
        assert_eq!(got[3].1.len(), 300);
        assert_eq!(d.table_size(), 0, "nothing indexed");
    }

    proptest! {
        #[test]
        fn encoded_lists_decode_to_themselves(
            fields in proptest::collection::vec(
                ("[a-z-]{1,20}", proptest::collection::vec(any::<u8>(), 0..40), 0u8..3, any::<bool>()),
                0..20,
            )
        ) {
            let mut block = Vec::new();
            for (n, v, repr, huff) in &fields {
                let first = match repr { 0 => 0x40, 1 => 0x00, _ => 0x10 };
                block.push(first);
                for s in [n.as_bytes(), v.as_slice()] {
                    if *huff {
                        let h = huffman_encode(s);
                        write_int(h.len(), 7, 0x80, &mut block);
                        block.extend_from_slice(&h);
                    } else {
                        write_string(s, &mut block);
                    }
                }
            }
            let mut d = Decoder::new(4096, 1 << 20);
            let mut got = Vec::new();
            d.decode(&block, |n, v| got.push((n.to_vec(), v.to_vec()))).unwrap();
            let want: Vec<(Vec<u8>, Vec<u8>)> =
                fields.iter().map(|(n, v, _, _)| (n.as_bytes().to_vec(), v.clone())).collect();
            prop_assert_eq!(got, want);
            prop_assert!(d.table_size() <= 4096);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut d = Decoder::new(4096, 1 << 16);
            let _ = d.decode(&bytes, |_, _| {});
            let _ = d.decode(&bytes, |_, _| {});
            prop_assert!(d.table_size() <= 4096);
        }
    }
}
