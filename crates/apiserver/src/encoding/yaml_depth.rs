//! How deeply a YAML document nests collections, found in one linear pass before it is parsed.
//!
//! The YAML parser's cost grows much faster than the nesting it is given (a body of
//! `x: ` and 40,000 `[` and `]`, 80 KB, took it 2.4 s to refuse), and it only stops at its own
//! depth limit after reading everything. This scanner follows just enough of YAML's lexical
//! structure to count, at every point, the collections the parser would have open there:
//! flow brackets, block sequences and mappings opened by `- `, `? `, `: ` and `key:` at a
//! deeper indentation (and a sequence written at its key's indentation), and it skips the text
//! that cannot open any (quoted and block scalars, continuation lines of plain scalars,
//! comments, tags and anchors) by the parser's own rules for where those end. So a
//! well-formed document is never counted deeper than it is, and the text the parser would
//! tokenize is never skipped. Malformed documents may count differently; the parser refuses
//! them anyway.

/// The deepest nesting of collections a request body may have: what a JSON body may
/// (`serde_json` refuses the 128th level).
pub const MAX_DEPTH: usize = 127;

/// A document nests collections deeper than allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the document nests collections deeper than {limit} levels (line {line})")]
pub struct TooDeep {
    /// The limit that was passed.
    pub limit: usize,
    /// The line (from 1) where the document went past it.
    pub line: usize,
}

/// Checks that `doc` (YAML, UTF-8) never nests more than `limit` collections, in time linear
/// in its length and without recursion.
///
/// # Errors
/// [`TooDeep`] at the first point where more than `limit` collections are open.
pub fn check(doc: &[u8], limit: usize) -> Result<(), TooDeep> {
    let mut s = Scanner {
        doc,
        i: 0,
        levels: Vec::new(),
        indentless: 0,
        flow: 0,
        limit,
        plain: false,
    };
    s.run().map_err(|Deep| TooDeep {
        limit,
        line: 1
            + (0..s.i.min(doc.len()))
                .filter(|&k| doc[k] == b'\n' || (doc[k] == b'\r' && doc.get(k + 1) != Some(&b'\n')))
                .count(),
    })
}

/// The limit was passed.
struct Deep;

type Step = Result<(), Deep>;

/// A block collection the parser has open: its column and whether it is a sequence.
struct Level {
    col: usize,
    seq: bool,
    /// A mapping whose current value is a sequence written at the mapping's own column
    /// (`key:` then `- item` below it): one more level, without an indentation of its own.
    indentless: bool,
}

struct Scanner<'a> {
    doc: &'a [u8],
    i: usize,
    /// Open block collections, innermost last (at most `limit + 1` long).
    levels: Vec<Level>,
    /// How many of `levels` have an indentless sequence open.
    indentless: usize,
    /// Open flow collections (`[` and `{`).
    flow: usize,
    limit: usize,
    /// A plain scalar was the last thing on the previous line and has not been ended by a
    /// comment: more-indented lines continue it.
    plain: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// The characters of an anchor or alias name.
fn is_anchor_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// The characters of a tag (other than a verbatim `!<…>` one).
fn is_tag_char(b: u8) -> bool {
    is_anchor_char(b) || b";/?:@&=+$.%!~*'()".contains(&b)
}

fn is_flow_indicator(b: u8) -> bool {
    b",[]{}".contains(&b)
}

impl Scanner<'_> {
    fn peek(&self, at: usize) -> Option<u8> {
        self.doc.get(at).copied()
    }

    /// The length of the line break at `at` (CR LF, CR, LF, NEL, LS, PS), 0 if none.
    fn break_len(&self, at: usize) -> usize {
        match &self.doc[at.min(self.doc.len())..] {
            [b'\r', b'\n', ..] => 2,
            [b'\r' | b'\n', ..] => 1,
            [0xC2, 0x85, ..] => 2,
            [0xE2, 0x80, 0xA8 | 0xA9, ..] => 3,
            _ => 0,
        }
    }

    /// Whether `at` is a blank, a line break or the end.
    fn blankz(&self, at: usize) -> bool {
        self.peek(at).is_none_or(is_blank) || self.break_len(at) > 0
    }

    fn at_eol(&self) -> bool {
        self.i >= self.doc.len() || self.break_len(self.i) > 0
    }

    fn skip_blanks(&mut self) -> usize {
        let from = self.i;
        while self.peek(self.i).is_some_and(is_blank) {
            self.i += 1;
        }
        self.i - from
    }

    /// Moves past the rest of the line and its break.
    fn next_line(&mut self) {
        while !self.at_eol() {
            self.i += 1;
        }
        self.i += self.break_len(self.i);
    }

    /// The column of the innermost open block collection (-1 at the top).
    fn indent(&self) -> isize {
        self.levels.last().map_or(-1, |l| l.col as isize)
    }

    fn check_depth(&self) -> Step {
        if self.levels.len() + self.indentless + self.flow > self.limit {
            return Err(Deep);
        }
        Ok(())
    }

    fn run(&mut self) -> Step {
        while self.i < self.doc.len() {
            self.line()?;
        }
        Ok(())
    }

    /// One line in block context, from its start; leaves `i` at the start of a later line.
    fn line(&mut self) -> Step {
        // A byte order mark at a line's start is skipped, as one column.
        let bom = self.doc[self.i..].starts_with(BOM);
        if bom {
            self.i += BOM.len();
        }
        let start = self.i;
        while self.peek(self.i) == Some(b' ') {
            self.i += 1;
        }
        let col = self.i - start + usize::from(bom);
        self.skip_blanks();
        if self.at_eol() {
            // An empty line; it does not end a plain scalar.
            self.i += self.break_len(self.i);
            return Ok(());
        }
        let c = self.doc[self.i];
        if c == b'#' {
            self.plain = false;
            self.next_line();
            return Ok(());
        }
        let marker = (c == b'-' || c == b'.') && self.doc[self.i..].starts_with(&[c; 3]);
        if col == 0 && marker && self.blankz(self.i + 3) {
            // A document marker: everything open is closed.
            self.levels.clear();
            self.indentless = 0;
            self.flow = 0;
            self.plain = false;
            self.i += 3;
            if c == b'-' {
                self.skip_blanks();
                if !self.at_eol() && self.peek(self.i) != Some(b'#') {
                    return self.node(4, false);
                }
            }
            self.next_line();
            return Ok(());
        }
        if col == 0 && c == b'%' {
            self.next_line();
            return Ok(());
        }
        if self.plain && col as isize > self.indent() {
            self.plain_rest();
            return Ok(());
        }
        self.plain = false;
        while self.levels.last().is_some_and(|l| l.col > col) {
            if self.levels.pop().is_some_and(|l| l.indentless) {
                self.indentless -= 1;
            }
        }
        self.block_entries(col)
    }

    /// `- `, `? ` and `: ` at the start of a node (each may open a collection), then the
    /// node after them.
    fn block_entries(&mut self, mut col: usize) -> Step {
        loop {
            let c = self.doc[self.i];
            if !(c == b'-' || c == b'?' || c == b':') || !self.blankz(self.i + 1) {
                return self.node(col, true);
            }
            if c == b'-' {
                self.open_seq(col)?;
            } else {
                self.open_map(col)?;
            }
            self.i += 1;
            col += 1 + self.skip_blanks();
            if self.at_eol() || self.peek(self.i) == Some(b'#') {
                self.next_line();
                return Ok(());
            }
        }
    }

    /// A sequence entry at `col`: the same sequence, a sequence as the value of the mapping
    /// at that column, or a new, deeper sequence.
    fn open_seq(&mut self, col: usize) -> Step {
        if let Some(top) = self.levels.last_mut() {
            if top.col == col {
                if !top.seq && !top.indentless {
                    top.indentless = true;
                    self.indentless += 1;
                    return self.check_depth();
                }
                return Ok(());
            }
        }
        self.levels.push(Level {
            col,
            seq: true,
            indentless: false,
        });
        self.check_depth()
    }

    /// A mapping key at `col`: the next key of the mapping there, or a new, deeper mapping.
    fn open_map(&mut self, col: usize) -> Step {
        while let Some(top) = self.levels.last_mut() {
            if top.col != col {
                break;
            }
            if !top.seq {
                if top.indentless {
                    // A key at the mapping's column ends its indentless sequence.
                    top.indentless = false;
                    self.indentless -= 1;
                }
                return Ok(());
            }
            // A sequence cannot go on at a key's column: it has ended.
            self.levels.pop();
        }
        self.levels.push(Level {
            col,
            seq: false,
            indentless: false,
        });
        self.check_depth()
    }

    /// A node starting at `i` (column `col`, not blank) in block context; `key` if it may be
    /// a mapping key. Leaves `i` at the start of a later line.
    fn node(&mut self, col: usize, key: bool) -> Step {
        loop {
            let Some(c) = self.peek(self.i) else {
                return Ok(());
            };
            match c {
                b'&' | b'!' => {
                    // Properties of the node (or of a key, whose mapping starts here).
                    self.skip_property();
                    self.skip_blanks();
                    if self.at_eol() || self.peek(self.i) == Some(b'#') {
                        self.next_line();
                        return Ok(());
                    }
                }
                b'*' => {
                    self.i += 1;
                    while self.peek(self.i).is_some_and(is_anchor_char) {
                        self.i += 1;
                    }
                    return self.after_scalar(col, key);
                }
                b'[' | b'{' => {
                    self.flow_collection()?;
                    return self.after_scalar(col, key);
                }
                b'\'' | b'"' => {
                    self.quoted(c);
                    return self.after_scalar(col, key);
                }
                b'|' | b'>' => {
                    self.block_scalar();
                    return Ok(());
                }
                _ => return self.plain_node(col, key),
            }
        }
    }

    /// After a node that ends mid-line: a `:` makes it a key of a mapping at `col`.
    fn after_scalar(&mut self, col: usize, key: bool) -> Step {
        self.skip_blanks();
        if key && self.peek(self.i) == Some(b':') && self.blankz(self.i + 1) {
            self.open_map(col)?;
            self.i += 1;
            return self.value();
        }
        self.next_line();
        Ok(())
    }

    /// The value after `key:`.
    fn value(&mut self) -> Step {
        self.skip_blanks();
        if self.at_eol() || self.peek(self.i) == Some(b'#') {
            self.next_line();
            return Ok(());
        }
        // Only its kind matters here (a second key on the line is an error): no column.
        self.node(0, false)
    }

    /// A plain scalar at `i`: a key if `: ` follows on the line (before a comment).
    fn plain_node(&mut self, col: usize, key: bool) -> Step {
        if key {
            let mut k = self.i;
            while k < self.doc.len() && self.break_len(k) == 0 {
                let b = self.doc[k];
                if b == b':' && self.blankz(k + 1) {
                    self.open_map(col)?;
                    self.i = k + 1;
                    return self.value();
                }
                if is_blank(b) && self.peek(k + 1) == Some(b'#') {
                    break;
                }
                k += 1;
            }
        }
        self.plain_rest();
        Ok(())
    }

    /// The rest of a line inside a plain scalar: it goes on to more-indented lines unless
    /// a comment ends it.
    fn plain_rest(&mut self) {
        let mut after_blank = true;
        while !self.at_eol() {
            let b = self.doc[self.i];
            if b == b'#' && after_blank {
                self.plain = false;
                self.next_line();
                return;
            }
            after_blank = is_blank(b);
            self.i += 1;
        }
        self.plain = true;
        self.i += self.break_len(self.i);
    }

    /// An anchor (`&name`) or tag (`!tag`, `!<verbatim>`) at `i`.
    fn skip_property(&mut self) {
        let verbatim = self.doc[self.i..].starts_with(b"!<");
        self.i += 1;
        if verbatim {
            while !self.blankz(self.i) && self.doc[self.i] != b'>' {
                self.i += 1;
            }
            if self.peek(self.i) == Some(b'>') {
                self.i += 1;
            }
            return;
        }
        let tag = self.doc[self.i - 1] == b'!';
        while self.peek(self.i).is_some_and(|b| {
            if tag {
                is_tag_char(b)
            } else {
                is_anchor_char(b)
            }
        }) {
            self.i += 1;
        }
    }

    /// A quoted scalar at `i` (it may span lines); leaves `i` after its closing quote.
    fn quoted(&mut self, q: u8) {
        self.i += 1;
        while let Some(b) = self.peek(self.i) {
            if b == q {
                if q == b'\'' && self.peek(self.i + 1) == Some(b'\'') {
                    self.i += 2;
                    continue;
                }
                self.i += 1;
                return;
            }
            if q == b'"' && b == b'\\' {
                self.i += 1;
            }
            self.i += 1;
        }
        self.i = self.i.min(self.doc.len());
    }

    /// A flow collection at `i` and everything nested in it (it may span lines, and
    /// indentation means nothing inside); leaves `i` after its closing bracket.
    fn flow_collection(&mut self) -> Step {
        let mut in_plain = false;
        let mut after_blank = false;
        while let Some(b) = self.peek(self.i) {
            let br = self.break_len(self.i);
            if br > 0 || is_blank(b) {
                self.i += br.max(1);
                after_blank = true;
                continue;
            }
            let token_start = !in_plain;
            let was_after_blank = std::mem::replace(&mut after_blank, false);
            match b {
                b'#' if token_start || was_after_blank => {
                    in_plain = false;
                    while !self.at_eol() {
                        self.i += 1;
                    }
                    continue;
                }
                b'[' | b'{' => {
                    in_plain = false;
                    self.flow += 1;
                    self.check_depth()?;
                }
                b']' | b'}' => {
                    in_plain = false;
                    self.flow = self.flow.saturating_sub(1);
                    if self.flow == 0 {
                        self.i += 1;
                        return Ok(());
                    }
                }
                b',' => in_plain = false,
                // In a plain scalar, `:` ends it only before a blank or a flow indicator; at
                // a token's start it is always an indicator.
                b':' if !in_plain || self.blankz(self.i + 1) => in_plain = false,
                b':' if self.peek(self.i + 1).is_some_and(is_flow_indicator) => in_plain = false,
                b'?' if token_start => {}
                b'\'' | b'"' if token_start => {
                    self.quoted(b);
                    continue;
                }
                b'&' | b'*' | b'!' if token_start => {
                    if b == b'*' {
                        self.i += 1;
                        while self.peek(self.i).is_some_and(is_anchor_char) {
                            self.i += 1;
                        }
                    } else {
                        self.skip_property();
                    }
                    continue;
                }
                _ => in_plain = true,
            }
            self.i += 1;
        }
        Ok(())
    }

    /// A block scalar (`|` or `>`) at `i`: its header, then its lines, which are those at
    /// least as indented as its indentation (given by the header, else by its first
    /// non-empty line, deeper than the enclosing collection), and empty lines. Leaves `i` at
    /// the start of the first line after it.
    fn block_scalar(&mut self) {
        self.i += 1;
        let mut increment = 0usize;
        for _ in 0..2 {
            match self.peek(self.i) {
                Some(b'+' | b'-') => {}
                Some(d @ b'1'..=b'9') => increment = usize::from(d - b'0'),
                _ => break,
            }
            self.i += 1;
        }
        self.next_line();
        let parent = self.indent();
        let indent = if increment > 0 {
            (parent.max(0) as usize) + increment
        } else {
            // The deepest of the leading empty lines and the first non-empty one.
            let mut deepest = 0;
            let mut k = self.i;
            loop {
                let spaces = self.doc[k..].iter().take_while(|&&b| b == b' ').count();
                deepest = deepest.max(spaces);
                let br = self.break_len(k + spaces);
                if br == 0 {
                    break;
                }
                k += spaces + br;
            }
            deepest.max((parent + 1) as usize).max(1)
        };
        loop {
            let start = self.i;
            let spaces = self.doc[start..].iter().take_while(|&&b| b == b' ').count();
            let at = start + spaces;
            if at >= self.doc.len() {
                self.i = at;
                return;
            }
            let br = self.break_len(at);
            if br == 0 && spaces < indent {
                return;
            }
            self.i = at;
            self.next_line();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(doc: &str, limit: usize) -> bool {
        check(doc.as_bytes(), limit).is_ok()
    }

    /// The smallest limit `doc` passes: the depth the scanner finds.
    fn depth(doc: &str) -> usize {
        (0..200).find(|&l| depth_ok(doc, l)).unwrap()
    }

    /// The depth serde_yaml_ng's value has (scalars 0).
    fn parsed_depth(doc: &str) -> usize {
        fn d(v: &serde_json::Value) -> usize {
            match v {
                serde_json::Value::Array(a) => 1 + a.iter().map(d).max().unwrap_or(0),
                serde_json::Value::Object(o) => 1 + o.values().map(d).max().unwrap_or(0),
                _ => 0,
            }
        }
        let v: serde_json::Value = serde_yaml_ng::from_str(doc).unwrap();
        d(&v)
    }

    #[test]
    fn counts_flow_and_block_nesting_as_the_parser_does() {
        for doc in [
            "a: 1\n",
            "x: [[1, 2], {a: [b]}]\n",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {app: web}\nspec:\n  containers:\n  - name: c\n    image: nginx\n    ports:\n    - containerPort: 80\n      protocol: TCP\n    args: [\"a\", 'b']\n",
            "- - - a\n  - b\n- c\n",
            "a:\n- b:\n  - c:\n    - d\n",
            "a:\n  b:\n    c:\n      d: [e]\nz: 1\n",
            "? a\n: [c]\n",
            "- a: 1\n  b:\n  - x\n  - y\n  c: 2\n",
            "{\"a\": {\"b\": [1, {\"c\": []}]}}",
            "k: &anchor\n  x: [1]\nj: *anchor\n",
            "--- \n- a\n...\n",
            "x: !!str tagged\ny: !!map\n  z: [w]\n",
            "\u{feff}a:\n  b: c\n",
            "a:\r\n  - [b]\r\nc: d\r\n",
        ] {
            assert_eq!(depth(doc), parsed_depth(doc), "{doc:?}");
        }
    }

    #[test]
    fn text_that_cannot_hold_structure_is_not_counted() {
        let deep = "[".repeat(300);
        for doc in [
            // Block scalars, with and without an indentation indicator, with more- and
            // less-indented lines, and at the top.
            format!("a: |\n  {deep}\n    {deep}\n\n  {deep}\nb: 1\n"),
            format!("- >2-\n    {deep}\n  {deep}\n- x\n"),
            format!("--- |\n {deep}\n"),
            format!("a:\n  b: |+\n\n      {deep}\n       {deep}\n  c: d\n"),
            // Quoted scalars, over several lines, with escapes.
            format!("a: \"{deep} \\\" {deep}\n  {deep}\"\nb: '{deep}''{deep}\n {deep}'\n"),
            format!("x: [\"{deep}\", '{deep}']\n"),
            // Plain scalars: brackets inside, and continuation lines.
            format!("a: text {deep}\n  more {deep}\n  - not an entry {deep}\nb: c\n"),
            format!("- item {deep}\n  {deep}\n"),
            format!("key{deep}: value\n"),
            format!("x: [a{}b]\n", "(".repeat(300)),
            // Comments.
            format!("# {deep}\na: b # {deep}\nc: [d, # {deep}\n  e]\n"),
        ] {
            assert!(depth(&doc) <= 3, "{doc:?}: {}", depth(&doc));
            // And the parser reads them (they are legitimate).
            assert!(
                serde_yaml_ng::from_str::<serde_json::Value>(&doc).is_ok(),
                "{doc:?}"
            );
        }
        // A verbatim tag may hold brackets.
        assert!(depth(&format!("a: !<tag:{deep}> b\n")) <= 1);
    }

    #[test]
    fn comments_end_plain_scalars_so_what_follows_is_counted() {
        let deep = "[".repeat(50);
        assert!(!depth_ok(&format!("a: b\n  # c\n  {deep}\n"), 40));
        assert!(!depth_ok(&format!("a: b # c\n  {deep}\n"), 40));
        // A quote inside a flow plain scalar does not start a quoted one.
        assert!(!depth_ok(&format!("x: [it's {deep}\n"), 40));
        // A line break inside a comment ends it, whichever break it is.
        assert!(!depth_ok(&format!("# c\u{2028}{deep}\n"), 40));
        assert!(!depth_ok(&format!("# c\r{deep}\n"), 40));
    }

    #[test]
    fn refuses_past_the_limit_and_says_where() {
        let n = MAX_DEPTH;
        let json_like = format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(check(json_like.as_bytes(), MAX_DEPTH).is_ok());
        let one_more = format!("[{json_like}]");
        assert_eq!(
            check(one_more.as_bytes(), MAX_DEPTH),
            Err(TooDeep {
                limit: MAX_DEPTH,
                line: 1
            })
        );
        let in_block = format!("a: b\nx: {json_like}\n");
        assert_eq!(check(in_block.as_bytes(), MAX_DEPTH).unwrap_err().line, 2);
        let compact = "- ".repeat(200) + "x\n";
        assert!(check(compact.as_bytes(), MAX_DEPTH).is_err());
        let mut indented = String::new();
        for k in 0..200 {
            indented.push_str(&" ".repeat(k));
            indented.push_str("k:\n");
        }
        assert!(check(indented.as_bytes(), MAX_DEPTH).is_err());
        // `key:` then `- ` at the key's column: each such sequence is a level of its own.
        let indentless = |n: usize| {
            let mut doc = String::new();
            for k in 0..n {
                doc.push_str(&" ".repeat(2 * k));
                doc.push_str("- k:\n");
            }
            doc + &" ".repeat(2 * n) + "- x\n"
        };
        assert_eq!(depth(&indentless(20)), parsed_depth(&indentless(20)));
        let indentless = indentless(100);
        assert!(check(indentless.as_bytes(), MAX_DEPTH).is_err());
        // Properties repeated without end are not recursion.
        let props = "&a ".repeat(100_000) + "x: [y]\n";
        assert!(check(props.as_bytes(), MAX_DEPTH).is_ok());
    }

    fn arb_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        // Strings full of what YAML treats specially, so that they come out quoted, folded
        // or as block scalars.
        let text = proptest::string::string_regex("[a-z \\[\\]{}:#'\"\\-?&*!|>,%@\n\t]{0,12}")
            .unwrap()
            .prop_map(Value::String);
        let leaf = prop_oneof![
            text,
            any::<i32>().prop_map(Value::from),
            any::<bool>().prop_map(Value::Bool),
            Just(Value::Null),
        ];
        leaf.prop_recursive(12, 200, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z:#\\[ ]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn value_depth(v: &serde_json::Value) -> usize {
        match v {
            serde_json::Value::Array(a) => 1 + a.iter().map(value_depth).max().unwrap_or(0),
            serde_json::Value::Object(o) => 1 + o.values().map(value_depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    proptest::proptest! {
        /// What a YAML writer produces is counted exactly as deep as it is: never refused
        /// below the limit, never let through above it.
        #[test]
        fn written_documents_are_counted_exactly(v in arb_value()) {
            let doc = serde_yaml_ng::to_string(&v).unwrap();
            let want = value_depth(&v);
            proptest::prop_assert!(check(doc.as_bytes(), want).is_ok(), "{doc}");
            if want > 0 {
                proptest::prop_assert!(check(doc.as_bytes(), want - 1).is_err(), "{doc}");
            }
            // The same as JSON (flow style).
            let json = serde_json::to_string_pretty(&v).unwrap();
            proptest::prop_assert!(check(json.as_bytes(), want).is_ok(), "{json}");
            if want > 0 {
                proptest::prop_assert!(check(json.as_bytes(), want - 1).is_err(), "{json}");
            }
        }
    }
}
