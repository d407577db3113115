//! Cutting a list response into its items while it arrives.
//!
//! A list body is one JSON object, `{"kind":…,"apiVersion":…,"metadata":{…},"items":[…]}`,
//! and for a large collection nearly all of it is `items`. [`ListSplitter`] reads the body
//! chunk by chunk and hands out each element of the top-level `items` array as soon as its
//! closing brace arrives, so a caller can decode and store items while the rest is still on
//! the wire and never holds the whole body. Everything outside the items (the *skeleton*, with
//! `"items":[]`) is kept, and parsed at the end for the list's metadata.
//!
//! The splitter tracks only strings and nesting; it does not validate JSON. Items are to be
//! decoded by a validating decoder, and the skeleton is parsed by serde, so malformed text
//! is still an error — reported by them, or by [`ListSplitter::finish`] when the body ends
//! inside a value.

/// The error of a body that is not a list object the splitter can cut.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// An element of `items` is not a JSON object.
    #[error("a list item at byte {0} is not a JSON object")]
    ItemNotObject(u64),
    /// One item exceeds the limit.
    #[error("a list item exceeds {0} bytes")]
    ItemTooLarge(usize),
    /// The text outside the items exceeds the limit.
    #[error("the list's text outside its items exceeds {0} bytes")]
    SkeletonTooLarge(usize),
    /// The body ended inside a value.
    #[error("the list body ended before its last value was complete")]
    Truncated,
}

/// Where the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Outside the items array.
    Skeleton,
    /// Inside `items`, between elements.
    Between,
    /// Inside an element of `items`.
    Item,
}

/// See the module docs. Feed chunks with [`push`](Self::push), collect the items it
/// returns, then call [`finish`](Self::finish) for the skeleton.
#[derive(Debug)]
pub struct ListSplitter {
    mode: Mode,
    /// Nesting depth: 1 inside the list object, 2 inside `items`, 3+ inside an element.
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The last string completed at depth 1, while it may still be a key (`items`?).
    last_key_is_items: bool,
    /// A `:` followed that string.
    colon_after_key: bool,
    /// The current string at depth 1 so far (only its first bytes matter).
    key_prefix: Vec<u8>,
    skeleton: Vec<u8>,
    /// An element that began in an earlier chunk.
    partial: Vec<u8>,
    /// Bytes consumed so far (for error positions).
    offset: u64,
    max_item: usize,
}

/// The longest skeleton accepted: metadata is small; anything this large is not a list.
const MAX_SKELETON: usize = 1 << 20;

impl ListSplitter {
    /// A splitter refusing items longer than `max_item` bytes.
    pub fn new(max_item: usize) -> ListSplitter {
        ListSplitter {
            mode: Mode::Skeleton,
            depth: 0,
            in_string: false,
            escaped: false,
            last_key_is_items: false,
            colon_after_key: false,
            key_prefix: Vec::new(),
            skeleton: Vec::new(),
            partial: Vec::new(),
            offset: 0,
            max_item,
        }
    }

    /// Scans the next chunk; `emit` gets each item completed in it, in order, as its exact
    /// JSON text (borrowed for the call).
    ///
    /// # Errors
    /// See [`SplitError`]; the splitter should then be dropped.
    pub fn push(&mut self, chunk: &[u8], mut emit: impl FnMut(&[u8])) -> Result<(), SplitError> {
        let b = chunk;
        let mut i = 0;
        // Start, in this chunk, of the current element and of the current skeleton run.
        let mut item_start = 0;
        let mut skel_start = 0;
        while i < b.len() {
            if self.escaped {
                self.escaped = false;
                i += 1;
                continue;
            }
            if self.in_string {
                // Most bytes are inside strings: jump to the next quote or backslash.
                let Some(k) = memchr::memchr2(b'"', b'\\', &b[i..]) else {
                    self.note_key_bytes(&b[i..]);
                    break;
                };
                self.note_key_bytes(&b[i..i + k]);
                i += k;
                if b[i] == b'\\' {
                    // The escaped byte may be in the next chunk.
                    self.escaped = true;
                    if self.mode == Mode::Skeleton && self.depth == 1 {
                        // An escaped key is never taken for `items`.
                        self.key_prefix.push(0);
                    }
                    i += 1;
                    continue;
                }
                self.in_string = false;
                if self.depth == 1 && self.mode == Mode::Skeleton {
                    self.last_key_is_items = self.key_prefix == b"items";
                }
                i += 1;
                continue;
            }
            let c = b[i];
            match self.mode {
                Mode::Skeleton => match c {
                    b'"' => {
                        self.in_string = true;
                        self.key_prefix.clear();
                        self.colon_after_key = false;
                    }
                    b':' if self.depth == 1 => self.colon_after_key = self.last_key_is_items,
                    b'{' | b'[' => {
                        self.depth += 1;
                        if c == b'[' && self.depth == 2 && self.colon_after_key {
                            // `"items":[` — keep the bracket, not what follows.
                            self.save_skeleton(&b[skel_start..=i])?;
                            self.mode = Mode::Between;
                        }
                        self.last_key_is_items = false;
                        self.colon_after_key = false;
                    }
                    b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                    b' ' | b'\n' | b'\r' | b'\t' => {}
                    _ => {
                        self.last_key_is_items = false;
                        self.colon_after_key = false;
                    }
                },
                Mode::Between => match c {
                    b'{' => {
                        self.mode = Mode::Item;
                        self.depth += 1;
                        item_start = i;
                    }
                    b']' => {
                        self.mode = Mode::Skeleton;
                        self.depth -= 1;
                        skel_start = i;
                    }
                    b',' | b' ' | b'\n' | b'\r' | b'\t' => {}
                    _ => return Err(SplitError::ItemNotObject(self.offset + i as u64)),
                },
                Mode::Item => match c {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 2 {
                            let tail = &b[item_start..=i];
                            if self.partial.is_empty() {
                                emit(tail);
                            } else {
                                self.partial.extend_from_slice(tail);
                                self.check_item_size()?;
                                emit(&self.partial);
                                self.partial.clear();
                            }
                            self.mode = Mode::Between;
                        }
                    }
                    _ => {}
                },
            }
            i += 1;
        }
        match self.mode {
            Mode::Skeleton => self.save_skeleton(&b[skel_start.min(b.len())..])?,
            Mode::Item => {
                self.partial
                    .extend_from_slice(&b[item_start.min(b.len())..]);
                self.check_item_size()?;
            }
            Mode::Between => {}
        }
        self.offset += b.len() as u64;
        Ok(())
    }

    fn save_skeleton(&mut self, s: &[u8]) -> Result<(), SplitError> {
        self.skeleton.extend_from_slice(s);
        if self.skeleton.len() > MAX_SKELETON {
            return Err(SplitError::SkeletonTooLarge(MAX_SKELETON));
        }
        Ok(())
    }

    /// Keeps the first bytes of a string at depth 1, to recognise the key `items`.
    fn note_key_bytes(&mut self, s: &[u8]) {
        if self.mode == Mode::Skeleton && self.depth == 1 && self.key_prefix.len() <= 5 {
            let take = s.len().min(6 - self.key_prefix.len());
            self.key_prefix.extend_from_slice(&s[..take]);
        }
    }

    fn check_item_size(&self) -> Result<(), SplitError> {
        if self.partial.len() > self.max_item {
            Err(SplitError::ItemTooLarge(self.max_item))
        } else {
            Ok(())
        }
    }

    /// The skeleton — the list without its items' text (`"items":[]`) — once the body has
    /// ended.
    ///
    /// # Errors
    /// [`SplitError::Truncated`] if the body ended inside a value.
    pub fn finish(self) -> Result<Vec<u8>, SplitError> {
        if self.depth != 0 || self.in_string || self.escaped || self.mode != Mode::Skeleton {
            return Err(SplitError::Truncated);
        }
        Ok(self.skeleton)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, value::RawValue, Value};

    fn split(body: &[u8], cuts: &[usize]) -> Result<(Vec<Vec<u8>>, Vec<u8>), SplitError> {
        let mut sp = ListSplitter::new(1 << 20);
        let mut items = Vec::new();
        let mut at = 0;
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        points.sort_unstable();
        points.push(body.len());
        for p in points {
            sp.push(&body[at..p], |item| items.push(item.to_vec()))?;
            at = p;
        }
        Ok((items, sp.finish()?))
    }

    #[derive(serde::Deserialize)]
    struct Raw<'a> {
        #[serde(borrow)]
        items: Vec<&'a RawValue>,
    }

    fn check(body: &str, cuts: &[usize]) {
        let (items, skeleton) = split(body.as_bytes(), cuts).unwrap();
        let want: Raw<'_> = serde_json::from_str(body).unwrap();
        let want: Vec<&str> = want.items.iter().map(|r| r.get()).collect();
        let got: Vec<&str> = items
            .iter()
            .map(|i| std::str::from_utf8(i).unwrap())
            .collect();
        assert_eq!(got, want, "{body}");
        let mut expected: Value = serde_json::from_str(body).unwrap();
        expected["items"] = json!([]);
        let skeleton: Value = serde_json::from_slice(&skeleton).unwrap();
        assert_eq!(skeleton, expected);
    }

    #[test]
    fn items_and_skeleton() {
        check(
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5","items":"x"},"items":[{"a":"}\"{","b":[1,{"items":[2]}]} , {"c":{}}]}"#,
            &[],
        );
        // Metadata after the items, "items" as a value, an escaped key, no items.
        check(
            r#"{"items":[{"x":1}],"kind":"items","metadata":{"continue":"t"}}"#,
            &[3, 9],
        );
        check(r#"{"kind":"L","items":[],"metadata":{}}"#, &[1]);
        check(r#" { "items" : [ { } ] } "#, &[0, 5, 13]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            split(br#"{"items":[1]}"#, &[]).unwrap_err(),
            SplitError::ItemNotObject(10)
        );
        assert_eq!(
            split(br#"{"items":[{"a":"#, &[]).unwrap_err(),
            SplitError::Truncated
        );
        assert_eq!(
            split(br#"{"items":[{"a":1}]"#, &[]).unwrap_err(),
            SplitError::Truncated
        );
        let mut sp = ListSplitter::new(8);
        let r = sp.push(br#"{"items":[{"aaaa"#, |_| {});
        assert!(r.is_ok());
        assert_eq!(
            sp.push(br#"aaaaaaaaaa":1}]}"#, |_| {}),
            Err(SplitError::ItemTooLarge(8))
        );
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z{}\\[\\]\"\\\\:, ]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("items|[a-c]|\\{", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        // Any list, cut anywhere: the same items serde finds, and the rest as the skeleton.
        #[test]
        fn split_agrees_with_serde(
            meta in value(),
            items in prop::collection::vec(prop::collection::btree_map("[a-c]|items", value(), 0..3), 0..4),
            items_first in any::<bool>(),
            pretty in any::<bool>(),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
        ) {
            let items: Vec<Value> = items.into_iter().map(|m| Value::Object(m.into_iter().collect())).collect();
            let mut list = serde_json::Map::new();
            if items_first {
                list.insert("items".into(), Value::Array(items));
                list.insert("metadata".into(), meta);
            } else {
                list.insert("metadata".into(), meta);
                list.insert("items".into(), Value::Array(items));
            }
            let v = Value::Object(list);
            let body = if pretty { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) };
            check(&body.unwrap(), &cuts);
        }
    }
}
