//! HPACK (RFC 7541), the header compression of HTTP/2: the server's decoder, whose dynamic
//! table lives as long as the connection.

use apiserver::server::http2::hpack::{encode_literal, Decoder};
use apiserver::server::http2::stream::request_parts;

/// The dynamic table size the server advertises (the default).
const TABLE_SIZE: usize = 4096;

/// Input: `limit blocks…`. The first byte sets the header list size limit (64 bytes per
/// unit, at least 64); then each block is a one-byte length and that many bytes, all decoded
/// in turn by one [`Decoder`] (blocks share its dynamic table, as on a connection), stopping
/// at the first error (after which a connection is closed). For each block, the fields'
/// sizes (name + value + 32 each) must stay within the limit, the dynamic table within its
/// size; the fields, re-encoded as literals ([`encode_literal`]), must decode by a fresh
/// decoder to the same fields; and they go through [`request_parts`], which builds the
/// request head of a stream from them.
pub fn hpack(data: &[u8]) {
    let Some((&limit, mut rest)) = data.split_first() else {
        return;
    };
    let max_list = (usize::from(limit) + 1) * 64;
    let mut decoder = Decoder::new(TABLE_SIZE, max_list);
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let (block, tail) = tail.split_at(len);
        rest = tail;
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut list = 0usize;
        let decoded = decoder.decode(block, |n, v| {
            list += n.len() + v.len() + 32;
            fields.push((n.to_vec(), v.to_vec()));
        });
        assert!(
            list <= max_list,
            "emitted {list} bytes of fields past the limit of {max_list}"
        );
        assert!(
            decoder.table_size() <= TABLE_SIZE,
            "the dynamic table grew to {} past {TABLE_SIZE}",
            decoder.table_size()
        );
        if decoded.is_err() {
            return;
        }
        let mut encoded = Vec::new();
        for (n, v) in &fields {
            encode_literal(n, v, &mut encoded);
        }
        let mut fresh = Decoder::new(TABLE_SIZE, max_list);
        let mut again = Vec::new();
        fresh
            .decode(&encoded, |n, v| again.push((n.to_vec(), v.to_vec())))
            .unwrap_or_else(|e| panic!("re-encoded fields do not decode: {e}"));
        assert_eq!(again, fields, "re-encoded fields decode differently");
        let _ = request_parts(&fields);
    }
}
