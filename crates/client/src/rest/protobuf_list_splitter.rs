//! [`ProtobufListSplitter`]: cuts a protobuf list body into its items while it arrives, the
//! protobuf counterpart of [`super::list_splitter::ListSplitter`].
//!
//! A protobuf list body is the `k8s\0` magic and an `Unknown` envelope whose `raw` field (2)
//! holds the `{Kind}List` message: its `ListMeta` (field 1) and one length-delimited field 2
//! per item. Every field says its length before its bytes, so the splitter needs no look-ahead:
//! it reads keys and lengths, hands out each item as soon as its last byte has arrived, keeps
//! the list metadata, and skips everything else. An item that lies in one chunk is handed out
//! as a slice of it; only items cut by a chunk boundary are copied, once.

use super::protobuf_decoder::read_list_meta;
use super::ObjectList;
use crate::protobuf_wire::{read_varint, WireError, MAGIC};
use bytes::Bytes;

/// Which field of the body a length-delimited value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// The envelope's `raw`: the list message.
    List,
    /// The list's `ListMeta`.
    Meta,
    /// One item.
    Item,
    /// Anything else: skipped.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes of the magic have been seen.
    Magic(usize),
    /// At a field boundary: a key comes next.
    Key,
    /// A varint value comes next (skipped).
    Varint,
    /// The length of a length-delimited `Field` comes next.
    Length(Field),
    /// This many bytes are skipped.
    Skip(u64),
    /// This many more bytes of an item or of the metadata are gathered.
    Gather(Field, usize),
}

/// Cuts a protobuf list body, given in chunks, into its items (see the module docs).
#[derive(Debug)]
pub struct ProtobufListSplitter {
    max_item: usize,
    state: State,
    /// The bytes of a varint cut by a chunk boundary.
    varint: Vec<u8>,
    /// Bytes left of the list message while inside it.
    in_list: Option<u64>,
    /// The length of the list message whose key and length were just read.
    enter_list: Option<u64>,
    seen_list: bool,
    /// An item or the metadata cut by a chunk boundary, as far as it has arrived.
    partial: Vec<u8>,
    /// The list metadata; several `ListMeta` fields merge, which appending them does.
    meta: Vec<u8>,
    /// Bytes consumed so far (error offsets count from the start of the body).
    offset: usize,
}

impl ProtobufListSplitter {
    /// A splitter that refuses an item (or list metadata) longer than `max_item` bytes.
    pub fn new(max_item: usize) -> ProtobufListSplitter {
        ProtobufListSplitter {
            max_item,
            state: State::Magic(0),
            varint: Vec::new(),
            in_list: None,
            enter_list: None,
            seen_list: false,
            partial: Vec::new(),
            meta: Vec::new(),
            offset: 0,
        }
    }

    /// Whether no byte has been taken yet.
    pub fn at_start(&self) -> bool {
        self.state == State::Magic(0)
    }

    /// Takes the next chunk of the body, calling `emit` with each item (its own message,
    /// borrowed for the call) completed by it, in body order.
    ///
    /// # Errors
    /// Bytes that are not a protobuf list body (the magic, a key, a length past the list
    /// message, an over-long item); once an error is returned the splitter takes nothing
    /// more correctly.
    pub fn push(&mut self, chunk: &[u8], mut emit: impl FnMut(&[u8])) -> Result<(), WireError> {
        let mut input = chunk;
        while !input.is_empty() {
            let taken = self.step(input, &mut emit)?;
            self.consume(taken)?;
            if let Some(len) = self.enter_list.take() {
                self.in_list = Some(len);
            }
            input = input.get(taken..).unwrap_or_default();
        }
        Ok(())
    }

    /// The list's metadata once the whole body has been taken, with no items.
    ///
    /// # Errors
    /// A body cut short, or one without a list message.
    pub fn finish(self) -> Result<ObjectList<Bytes>, WireError> {
        let at = self.offset;
        if self.state != State::Key || self.in_list.is_some() || !self.varint.is_empty() {
            return Err(WireError {
                what: "the list body ends inside a field",
                at,
            });
        }
        if !self.seen_list {
            return Err(WireError {
                what: "expected a list message in the envelope",
                at,
            });
        }
        let mut out = ObjectList {
            items: Vec::new(),
            resource_version: String::new(),
            continue_token: None,
            remaining_item_count: None,
        };
        read_list_meta(&self.meta, 0, &mut out)?;
        Ok(out)
    }

    fn fail<T>(&self, what: &'static str) -> Result<T, WireError> {
        Err(WireError {
            what,
            at: self.offset,
        })
    }

    /// Counts `n` bytes taken, and leaves the list message when its last byte is taken.
    fn consume(&mut self, n: usize) -> Result<(), WireError> {
        self.offset += n;
        let Some(left) = self.in_list else {
            return Ok(());
        };
        match left.checked_sub(n as u64) {
            Some(0) if self.state == State::Key && self.varint.is_empty() => {
                self.in_list = None;
                Ok(())
            }
            Some(left) if left > 0 => {
                self.in_list = Some(left);
                Ok(())
            }
            _ => self.fail("a field runs past the end of the list message"),
        }
    }

    /// Reads a varint from the front of `input`, carrying a cut one over in `self.varint`:
    /// the value if complete, and the bytes taken.
    fn varint(&mut self, input: &[u8]) -> Result<(Option<u64>, usize), WireError> {
        let end = input.iter().position(|b| b & 0x80 == 0);
        let take = end.map_or(input.len(), |i| i + 1);
        if self.varint.len() + take > 10 {
            return self.fail("a varint longer than ten bytes");
        }
        self.varint
            .extend_from_slice(input.get(..take).unwrap_or_default());
        if end.is_none() {
            return Ok((None, take));
        }
        let mut pos = 0;
        let value = read_varint(&self.varint, &mut pos);
        self.varint.clear();
        match value {
            Ok(value) => Ok((Some(value), take)),
            Err(e) => self.fail(e.what),
        }
    }

    /// One step on the front of `input` (never empty): the bytes it took.
    fn step(&mut self, input: &[u8], emit: &mut impl FnMut(&[u8])) -> Result<usize, WireError> {
        match self.state {
            State::Magic(seen) => {
                let want = MAGIC.get(seen..).unwrap_or_default();
                let take = want.len().min(input.len());
                if input.get(..take) != want.get(..take) {
                    return self.fail("expected the protobuf magic k8s\\0");
                }
                self.state = if seen + take == MAGIC.len() {
                    State::Key
                } else {
                    State::Magic(seen + take)
                };
                Ok(take)
            }
            State::Key => {
                let (key, taken) = self.varint(input)?;
                if let Some(key) = key {
                    let number = key >> 3;
                    self.state = match key & 7 {
                        0 => State::Varint,
                        1 => State::Skip(8),
                        5 => State::Skip(4),
                        2 => State::Length(match (self.in_list.is_some(), number) {
                            (false, 2) => Field::List,
                            (true, 1) => Field::Meta,
                            (true, 2) => Field::Item,
                            _ => Field::Other,
                        }),
                        _ => return self.fail("a field of an unknown or group wire type"),
                    };
                }
                Ok(taken)
            }
            State::Varint => {
                let (value, taken) = self.varint(input)?;
                if value.is_some() {
                    self.state = State::Key;
                }
                Ok(taken)
            }
            State::Length(field) => {
                let (len, taken) = self.varint(input)?;
                let Some(len) = len else {
                    return Ok(taken);
                };
                // What the length's own bytes leave of the list message.
                let room = self.in_list.map(|l| l.saturating_sub(taken as u64));
                if room.is_some_and(|room| len > room) {
                    return self.fail("a field runs past the end of the list message");
                }
                self.state = match field {
                    Field::List if len > 0 => {
                        self.seen_list = true;
                        // Entered once the length's own bytes are counted (see `push`).
                        self.enter_list = Some(len);
                        State::Key
                    }
                    Field::List => {
                        self.seen_list = true;
                        State::Key
                    }
                    Field::Meta | Field::Item => {
                        let len = usize::try_from(len).unwrap_or(usize::MAX);
                        // Metadata given in several fields adds up: bound the sum.
                        let kept = if field == Field::Meta {
                            self.meta.len()
                        } else {
                            0
                        };
                        if len.saturating_add(kept) > self.max_item {
                            return self.fail("an item longer than the limit");
                        }
                        if len == 0 {
                            if field == Field::Item {
                                emit(&[]);
                            }
                            State::Key
                        } else {
                            State::Gather(field, len)
                        }
                    }
                    Field::Other if len == 0 => State::Key,
                    Field::Other => State::Skip(len),
                };
                Ok(taken)
            }
            State::Skip(left) => {
                let take = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                let left = left - take as u64;
                self.state = if left == 0 {
                    State::Key
                } else {
                    State::Skip(left)
                };
                Ok(take)
            }
            State::Gather(field, left) => {
                let take = left.min(input.len());
                let bytes = input.get(..take).unwrap_or_default();
                let done = take == left;
                if done && self.partial.is_empty() {
                    // The whole value is in this chunk: no copy.
                    self.deliver(field, bytes, emit);
                } else {
                    self.partial.extend_from_slice(bytes);
                    if done {
                        let whole = std::mem::take(&mut self.partial);
                        self.deliver(field, &whole, emit);
                        // Keep the allocation for the next cut item.
                        self.partial = whole;
                        self.partial.clear();
                    }
                }
                self.state = if done {
                    State::Key
                } else {
                    State::Gather(field, left - take)
                };
                Ok(take)
            }
        }
    }

    fn deliver(&mut self, field: Field, bytes: &[u8], emit: &mut impl FnMut(&[u8])) {
        match field {
            Field::Item => emit(bytes),
            _ => self.meta.extend_from_slice(bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::protobuf_decoder::decode_protobuf_list;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    use proptest::prelude::*;
    use prost::Message as _;

    /// A list body as Kubernetes writes it: envelope, metadata, items.
    fn list_body(meta: &meta::ListMeta, items: &[Vec<u8>]) -> Vec<u8> {
        let mut raw = Vec::new();
        prost::encoding::message::encode(1, meta, &mut raw);
        for item in items {
            prost::encoding::bytes::encode(2, item, &mut raw);
        }
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("PodList".into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut body = MAGIC.to_vec();
        unknown.encode(&mut body).unwrap();
        body
    }

    /// Splits `body` at `cuts`: the items handed out and the finished list.
    fn split(
        body: &[u8],
        cuts: &[usize],
        max: usize,
    ) -> Result<(Vec<Vec<u8>>, ObjectList<Bytes>), WireError> {
        let mut s = ProtobufListSplitter::new(max);
        let mut items = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
            let cut = cut.clamp(from, body.len());
            s.push(&body[from..cut], |item| items.push(item.to_vec()))?;
            from = cut;
        }
        Ok((items, s.finish()?))
    }

    fn meta(rv: &str, token: Option<&str>, remaining: Option<i64>) -> meta::ListMeta {
        meta::ListMeta {
            self_link: None,
            resource_version: Some(rv.into()),
            r#continue: token.map(str::to_string),
            remaining_item_count: remaining,
        }
    }

    proptest! {
        #[test]
        fn any_cutting_gives_the_items_and_metadata_of_the_whole_body(
            items in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..20),
            rv in "[0-9]{1,12}",
            token in prop::option::of("[a-zA-Z0-9=]{0,40}"),
            remaining in prop::option::of(0i64..1_000_000),
            mut cuts in prop::collection::vec(0usize..8000, 0..12),
        ) {
            let body = list_body(&meta(&rv, token.as_deref(), remaining), &items);
            cuts.sort_unstable();
            let (got, list) = split(&body, &cuts, 1 << 20).unwrap();
            prop_assert_eq!(&got, &items);
            let whole = decode_protobuf_list(&Bytes::from(body.clone()), "test").unwrap();
            prop_assert_eq!(&list.resource_version, &whole.resource_version);
            prop_assert_eq!(&list.continue_token, &whole.continue_token);
            prop_assert_eq!(list.remaining_item_count, whole.remaining_item_count);
            prop_assert_eq!(list.resource_version, rv);
            // One byte at a time, too.
            let every: Vec<usize> = (1..body.len()).collect();
            prop_assert_eq!(split(&body, &every, 1 << 20).unwrap().0, items);
        }

        #[test]
        fn a_body_cut_short_is_an_error_not_a_shorter_list(
            items in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..100), 1..5),
            at in any::<prop::sample::Index>(),
        ) {
            let body = list_body(&meta("7", None, None), &items);
            // Anywhere before the list message's end (the empty contentEncoding and
            // contentType after it are four bytes that a body may leave out).
            let end = at.index(body.len() - 4);
            prop_assert!(split(&body[..end], &[end / 2], 1 << 20).is_err());
        }
    }

    #[test]
    fn items_in_one_chunk_are_handed_out_in_place() {
        let items = vec![vec![1u8; 50], vec![2u8; 70]];
        let body = list_body(&meta("9", Some("t"), Some(3)), &items);
        let mut s = ProtobufListSplitter::new(1 << 20);
        let range = body.as_ptr_range();
        let mut in_place = 0;
        s.push(&body, |item| {
            in_place += usize::from(range.contains(&item.as_ptr()));
        })
        .unwrap();
        assert_eq!(in_place, 2);
        let list = s.finish().unwrap();
        assert_eq!(list.resource_version, "9");
        assert_eq!(list.continue_token.as_deref(), Some("t"));
        assert_eq!(list.remaining_item_count, Some(3));
    }

    #[test]
    fn refuses_what_is_not_a_protobuf_list() {
        let err = |body: &[u8], max: usize| split(body, &[], max).unwrap_err().what;
        assert_eq!(
            err(br#"{"kind":"PodList"}"#, 100),
            "expected the protobuf magic k8s\\0"
        );
        assert_eq!(
            err(b"k8s\0", 100),
            "expected a list message in the envelope"
        );
        let body = list_body(&meta("1", None, None), &[vec![0; 200]]);
        assert_eq!(err(&body, 100), "an item longer than the limit");
        assert!(split(&body, &[], 200).is_ok());
        // List metadata given in many fields counts as one.
        let mut many = MAGIC.to_vec();
        let mut raw = Vec::new();
        for _ in 0..20 {
            prost::encoding::message::encode(1, &meta("12345", None, None), &mut raw);
        }
        prost::encoding::bytes::encode(2, &raw, &mut many);
        assert_eq!(err(&many, 100), "an item longer than the limit");
        assert_eq!(split(&many, &[], 1000).unwrap().1.resource_version, "12345");
        // An item whose length runs past the end of the list message (the item is 3 bytes
        // long, and the list message says it holds 4 bytes).
        let mut bad = MAGIC.to_vec();
        bad.extend_from_slice(&[0x12, 4, 0x12, 3, 1, 2]);
        bad.extend_from_slice(&[0x1a, 0]);
        assert_eq!(
            err(&bad, 100),
            "a field runs past the end of the list message"
        );
        // A group wire type.
        assert_eq!(
            err(b"k8s\0\x0b", 100),
            "a field of an unknown or group wire type"
        );
    }
}
