//! How targets that need more than one input cut the fuzzer's bytes apart.

/// Splits at the first NUL byte: `(before, after)`, or `(data, None)` without one. NUL never
/// occurs in the JSON text the two-part targets read, so a seed stays readable as
/// `base \0 patch`, and one mutated byte can move the cut.
pub(crate) fn split_nul(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    }
}

/// Cuts `data` into chunks whose sizes cycle through `sizes` (each taken as 1 + its value,
/// so no chunk is empty): the same body delivered with different chunk boundaries.
pub(crate) fn chunks<'a>(data: &'a [u8], sizes: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut i = 0;
    while !rest.is_empty() {
        let n = sizes
            .get(i % sizes.len().max(1))
            .map_or(rest.len(), |&s| usize::from(s) + 1)
            .min(rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
        i += 1;
    }
    out
}

/// JSON equality where floating-point numbers may differ in their last bits: `serde_json`
/// prints the shortest text of an `f64` but reads text back without guaranteed exact
/// rounding, so a float may move by an ulp through a print and a read.
pub(crate) fn json_same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(p), Some(q)) => p == q || (p - q).abs() <= p.abs().max(q.abs()) * 1e-15,
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_same(v, w)))
        }
        _ => a == b,
    }
}
