//! Where things are in a plan file: the position of each step (the n-th item of the top-level
//! `steps` list), of each key of a step, of the top-level keys and of each `outputs` entry.
//!
//! Found structurally, never by searching the text for an id: an `id:` inside a step's `config`,
//! or the words "id: r" inside a string, are not steps. TOML is read with `toml`'s spanned
//! document parser; JSON and YAML with a small scanner that knows just enough of each syntax
//! (quoted strings, comments, block scalars, flow collections) to find the first three levels
//! of the document. Positions are 1-based lines and 1-based *character* columns.
//!
//! The index is built in one pass over the source, so locating every problem of a plan costs
//! linear time in the size of the file, however many problems there are.

use crate::file::PlanFormat;
use serde_json::Value;

/// A 1-based line and 1-based character column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
}

/// One item of the `steps` list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StepLoc {
    /// Where the item starts (the first key of a block mapping, the `{` of a flow mapping).
    pub start: Option<Pos>,
    /// Its keys in file order, duplicates included.
    pub keys: Vec<(String, Pos)>,
}

impl StepLoc {
    /// The `nth` (from 0) occurrence of a key.
    pub fn key_nth(&self, key: &str, nth: usize) -> Option<Pos> {
        self.keys
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, p)| *p)
            .nth(nth)
    }

    /// The line that stands for the step: its `id` key, else its start.
    pub fn pos(&self) -> Option<Pos> {
        self.key_nth("id", 0).or(self.start)
    }
}

/// The positions of a plan file's structure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PlanIndex {
    /// Top-level keys in file order.
    pub top: Vec<(String, Pos)>,
    /// The items of the top-level `steps` list (or of the list [`build_list`](Self::build_list)
    /// was given), in order.
    pub steps: Vec<StepLoc>,
    /// The entries of the top-level `outputs` list, in order.
    pub outputs: Vec<Pos>,
}

impl PlanIndex {
    /// Indexes a source text. Never fails: what cannot be understood is left out.
    pub fn build(source: &str, format: PlanFormat) -> Self {
        Self::build_list(source, format, "steps")
    }

    /// Indexes a source text whose items are the top-level list `list` (`steps` in a plan,
    /// `edits` in an edits file).
    pub fn build_list(source: &str, format: PlanFormat, list: &str) -> Self {
        match format {
            PlanFormat::Json => flow_document(source, false, list),
            PlanFormat::Yaml => yaml_document(source, list),
            PlanFormat::Toml => toml_document(source, list),
        }
    }

    /// A top-level key.
    pub fn top_key(&self, key: &str) -> Option<Pos> {
        self.top.iter().find(|(k, _)| k == key).map(|(_, p)| *p)
    }
}

// ---------------------------------------------------------------------------------------------
// A cursor over the source that keeps the line and character column.

struct Cur<'a> {
    s: &'a [u8],
    i: usize,
    line: u32,
    col: u32,
}

impl<'a> Cur<'a> {
    fn new(s: &'a str) -> Self {
        Self {
            s: s.as_bytes(),
            i: 0,
            line: 1,
            col: 1,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn peek_at(&self, k: usize) -> Option<u8> {
        self.s.get(self.i + k).copied()
    }

    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.col,
        }
    }

    fn eof(&self) -> bool {
        self.i >= self.s.len()
    }

    fn bump(&mut self) {
        if let Some(&b) = self.s.get(self.i) {
            self.i += 1;
            if b == b'\n' {
                self.line += 1;
                self.col = 1;
            } else if b & 0xC0 != 0x80 {
                self.col += 1;
            }
        }
    }

    /// Spaces and tabs (not newlines).
    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r')) {
            self.bump();
        }
    }

    /// To the start of the next line (or the end).
    fn skip_line(&mut self) {
        while let Some(b) = self.peek() {
            self.bump();
            if b == b'\n' {
                break;
            }
        }
    }

    /// Whether the rest of the line is blank or a comment.
    fn at_line_end(&self) -> bool {
        let mut k = self.i;
        while let Some(&b) = self.s.get(k) {
            match b {
                b' ' | b'\t' | b'\r' => k += 1,
                b'\n' | b'#' => return true,
                _ => return false,
            }
        }
        true
    }

    /// Whitespace, newlines and (in YAML) comments.
    fn skip_ws(&mut self, yaml: bool) {
        let mut after_space = true;
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' | b'\r' | b'\n' => {
                    self.bump();
                    after_space = true;
                }
                b'#' if yaml && after_space => self.skip_line(),
                _ => break,
            }
        }
    }

    /// A quoted string starting at the quote; returns its text (escapes simplified). Spans lines.
    fn quoted(&mut self) -> String {
        let q = self.peek().unwrap_or(b'"');
        self.bump();
        let mut out = Vec::new();
        while let Some(b) = self.peek() {
            if b == q {
                // YAML single quotes escape themselves by doubling.
                if q == b'\'' && self.peek_at(1) == Some(b'\'') {
                    out.push(b'\'');
                    self.bump();
                    self.bump();
                    continue;
                }
                self.bump();
                return String::from_utf8_lossy(&out).into_owned();
            }
            if b == b'\\' && q == b'"' {
                self.bump();
                if let Some(e) = self.peek() {
                    out.push(e);
                    self.bump();
                }
                continue;
            }
            out.push(b);
            self.bump();
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

fn is_flow_end(b: u8) -> bool {
    matches!(b, b',' | b']' | b'}')
}

// ---------------------------------------------------------------------------------------------
// Flow collections: all of JSON, and YAML's `[...]` / `{...}`.

/// A node of the first few levels of a document. Deeper levels are skipped, not stored.
enum Node {
    Map(Vec<(String, Pos, Node)>),
    Seq(Vec<(Pos, Node)>),
    Other,
}

/// Reads one flow node at the cursor (after whitespace), storing `depth` levels of containers.
fn flow_node(c: &mut Cur<'_>, depth: u8, yaml: bool) -> Node {
    c.skip_ws(yaml);
    match c.peek() {
        Some(b'{' | b'[') if depth == 0 => {
            skip_flow(c, yaml);
            Node::Other
        }
        Some(b'{') => {
            c.bump();
            let mut entries = Vec::new();
            loop {
                c.skip_ws(yaml);
                match c.peek() {
                    None => break,
                    Some(b'}') => {
                        c.bump();
                        break;
                    }
                    Some(b',') => {
                        c.bump();
                        continue;
                    }
                    Some(b']') => break, // malformed; let the parser report it
                    _ => {}
                }
                let pos = c.pos();
                let key = flow_scalar(c, yaml, true);
                c.skip_ws(yaml);
                let value = if c.peek() == Some(b':') {
                    c.bump();
                    flow_node(c, depth - 1, yaml)
                } else {
                    Node::Other
                };
                entries.push((key, pos, value));
                c.skip_ws(yaml);
                // Anything unexpected before the next separator is skipped.
                while let Some(b) = c.peek() {
                    if is_flow_end(b) {
                        break;
                    }
                    c.bump();
                }
            }
            Node::Map(entries)
        }
        Some(b'[') => {
            c.bump();
            let mut items = Vec::new();
            loop {
                c.skip_ws(yaml);
                match c.peek() {
                    None => break,
                    Some(b']') => {
                        c.bump();
                        break;
                    }
                    Some(b',') => {
                        c.bump();
                        continue;
                    }
                    Some(b'}') => break,
                    _ => {}
                }
                let pos = c.pos();
                let node = flow_node(c, depth - 1, yaml);
                items.push((pos, node));
                c.skip_ws(yaml);
                while let Some(b) = c.peek() {
                    if is_flow_end(b) {
                        break;
                    }
                    c.bump();
                }
            }
            Node::Seq(items)
        }
        Some(_) => {
            flow_scalar(c, yaml, false);
            Node::Other
        }
        None => Node::Other,
    }
}

/// A scalar inside a flow collection; stops before `,`, `]`, `}`, and (for a key) before `:`.
fn flow_scalar(c: &mut Cur<'_>, yaml: bool, key: bool) -> String {
    match c.peek() {
        Some(b'"') => return c.quoted(),
        Some(b'\'') if yaml => return c.quoted(),
        Some(b'{' | b'[') => {
            skip_flow(c, yaml);
            return String::new();
        }
        _ => {}
    }
    let start = c.i;
    let mut end = c.i;
    while let Some(b) = c.peek() {
        if is_flow_end(b) || b == b'\n' {
            break;
        }
        if b == b':' && (key || !yaml) {
            let next = c.peek_at(1);
            if !yaml || next.is_none_or(|n| n.is_ascii_whitespace() || is_flow_end(n)) {
                break;
            }
        }
        if b == b'#' && yaml && c.i > start && c.s[c.i - 1].is_ascii_whitespace() {
            break;
        }
        c.bump();
        if !b.is_ascii_whitespace() {
            end = c.i;
        }
    }
    String::from_utf8_lossy(&c.s[start..end]).into_owned()
}

/// Skips a flow collection (any depth) without storing it; iterative, so deep nesting is fine.
fn skip_flow(c: &mut Cur<'_>, yaml: bool) {
    let mut depth = 0usize;
    let mut after_space = true;
    while let Some(b) = c.peek() {
        match b {
            b'{' | b'[' => {
                depth += 1;
                c.bump();
            }
            b'}' | b']' => {
                c.bump();
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return;
                }
            }
            b'"' => {
                c.quoted();
            }
            b'\'' if yaml && after_space => {
                c.quoted();
            }
            b'#' if yaml && after_space => c.skip_line(),
            _ => c.bump(),
        }
        after_space = matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b',' | b'[' | b'{');
        if depth == 0 {
            return;
        }
    }
}

/// Turns the top-level node of a document into an index.
fn index_of_root(root: Node, list: &str) -> PlanIndex {
    let mut index = PlanIndex::default();
    let Node::Map(entries) = root else {
        return index;
    };
    for (key, pos, value) in entries {
        match (key.as_str(), value) {
            (k, Node::Seq(items)) if k == list && index.top_key(list).is_none() => {
                index.steps = items
                    .into_iter()
                    .map(|(start, node)| StepLoc {
                        start: Some(start),
                        keys: match node {
                            Node::Map(e) => e.into_iter().map(|(k, p, _)| (k, p)).collect(),
                            _ => Vec::new(),
                        },
                    })
                    .collect();
            }
            ("outputs", Node::Seq(items)) if index.top_key("outputs").is_none() => {
                index.outputs = items.into_iter().map(|(p, _)| p).collect();
            }
            _ => {}
        }
        index.top.push((key, pos));
    }
    index
}

fn flow_document(source: &str, yaml: bool, list: &str) -> PlanIndex {
    let mut c = Cur::new(source);
    index_of_root(flow_node(&mut c, 3, yaml), list)
}

// ---------------------------------------------------------------------------------------------
// YAML block style.

/// One logical line of block YAML: its indentation, the `- ` indicators on it, the key it
/// starts (if any) and, when its value is a flow collection, that collection.
struct Line {
    indent: u32,
    /// Column (0-based) of each `-` indicator.
    dashes: Vec<u32>,
    /// Position of the first thing after the last dash (or of the line's content).
    content: Pos,
    key: Option<(String, Pos, u32)>,
    flow: Option<Node>,
}

/// Reads one logical line: the line itself plus any continuation a quoted scalar, a flow
/// collection or a block scalar that starts on it takes. `None` for blank and comment lines
/// and document markers.
fn yaml_line(c: &mut Cur<'_>) -> Option<Line> {
    let line_start = c.i;
    c.skip_blanks();
    let indent = c.col - 1;
    if c.at_line_end() {
        c.skip_line();
        return None;
    }
    if c.i == line_start + indent as usize
        && indent == 0
        && (c.s[c.i..].starts_with(b"---")
            || c.s[c.i..].starts_with(b"...")
            || c.peek() == Some(b'%'))
    {
        c.skip_line();
        return None;
    }
    let mut dashes = Vec::new();
    // Sequence indicators, anchors and tags before the content.
    loop {
        match c.peek() {
            Some(b'-') if matches!(c.peek_at(1), None | Some(b' ' | b'\t' | b'\n' | b'\r')) => {
                dashes.push(c.col - 1);
                c.bump();
                c.skip_blanks();
            }
            Some(b'&' | b'!') => {
                while c.peek().is_some_and(|b| !b.is_ascii_whitespace()) {
                    c.bump();
                }
                c.skip_blanks();
            }
            _ => break,
        }
    }
    let content = c.pos();
    let mut line = Line {
        indent,
        dashes,
        content,
        key: None,
        flow: None,
    };
    if c.at_line_end() {
        c.skip_line();
        return Some(line);
    }
    // A key, if the content is `key: ...`.
    let key_col = c.col - 1;
    let save = (c.i, c.line, c.col);
    let key_pos = c.pos();
    let key_text = match c.peek() {
        Some(b'"' | b'\'') => {
            let t = c.quoted();
            c.skip_blanks();
            Some(t)
        }
        Some(b'[' | b'{' | b'|' | b'>' | b'#') => None,
        _ => {
            let start = c.i;
            let mut end = None;
            while let Some(b) = c.peek() {
                if b == b'\n' || (b == b'#' && c.i > start && c.s[c.i - 1].is_ascii_whitespace()) {
                    break;
                }
                if b == b':' && matches!(c.peek_at(1), None | Some(b' ' | b'\t' | b'\n' | b'\r')) {
                    end = Some(c.i);
                    break;
                }
                c.bump();
            }
            end.map(|e| {
                String::from_utf8_lossy(&c.s[start..e])
                    .trim_end()
                    .to_owned()
            })
        }
    };
    match key_text {
        Some(k) if c.peek() == Some(b':') => {
            c.bump();
            c.skip_blanks();
            line.key = Some((k, key_pos, key_col));
        }
        _ => {
            // Not a key: the content is a value; read it again as one.
            c.i = save.0;
            c.line = save.1;
            c.col = save.2;
        }
    }
    // The value on this line.
    let owner = line
        .key
        .as_ref()
        .map(|k| k.2)
        .or(line.dashes.last().copied())
        .unwrap_or(indent);
    while matches!(c.peek(), Some(b'&' | b'!')) {
        while c.peek().is_some_and(|b| !b.is_ascii_whitespace()) {
            c.bump();
        }
        c.skip_blanks();
    }
    match c.peek() {
        Some(b'[' | b'{') => {
            line.flow = Some(flow_node(c, 2, true));
            c.skip_line();
        }
        Some(b'"' | b'\'') => {
            c.quoted();
            c.skip_line();
        }
        Some(b'|' | b'>') => {
            c.skip_line();
            skip_block_scalar(c, owner);
        }
        _ => c.skip_line(),
    }
    Some(line)
}

/// Skips the lines of a block scalar: blank lines and lines indented more than `owner`.
fn skip_block_scalar(c: &mut Cur<'_>, owner: u32) {
    loop {
        let save = (c.i, c.line, c.col);
        if c.eof() {
            return;
        }
        c.skip_blanks();
        let indent = c.col - 1;
        let blank = matches!(c.peek(), None | Some(b'\n'));
        c.i = save.0;
        c.line = save.1;
        c.col = save.2;
        if blank || indent > owner {
            c.skip_line();
        } else {
            return;
        }
    }
}

fn yaml_document(source: &str, list: &str) -> PlanIndex {
    let mut c = Cur::new(source);
    let mut lines = Vec::new();
    while !c.eof() {
        // A document that starts with a flow collection is read as one.
        if lines.is_empty() {
            let save = (c.i, c.line, c.col);
            c.skip_ws(true);
            while c.s[c.i..].starts_with(b"---") || c.peek() == Some(b'%') {
                c.skip_line();
                c.skip_ws(true);
            }
            if matches!(c.peek(), Some(b'{' | b'[')) {
                return index_of_root(flow_node(&mut c, 3, true), list);
            }
            c.i = save.0;
            c.line = save.1;
            c.col = save.2;
        }
        if let Some(line) = yaml_line(&mut c) {
            lines.push(line);
        }
    }
    index_of_block(&lines, list)
}

fn index_of_block(lines: &[Line], list: &str) -> PlanIndex {
    let mut index = PlanIndex::default();
    let Some(first) = lines.first() else {
        return index;
    };
    if !first.dashes.is_empty() {
        return index; // a top-level list: not a plan
    }
    let root = first.indent;
    let mut i = 0;
    while i < lines.len() {
        let line = &lines[i];
        i += 1;
        let Some((key, pos, col)) = &line.key else {
            continue;
        };
        if !line.dashes.is_empty() || *col != root {
            continue;
        }
        // The lines of this key's value.
        let body_start = i;
        while i < lines.len()
            && (lines[i].indent > root || (lines[i].indent == root && !lines[i].dashes.is_empty()))
        {
            i += 1;
        }
        let body = &lines[body_start..i];
        let first_time = index.top_key(key).is_none();
        match key.as_str() {
            k if k == list && first_time => {
                index.steps = match &line.flow {
                    Some(Node::Seq(items)) => items
                        .iter()
                        .map(|(start, node)| StepLoc {
                            start: Some(*start),
                            keys: match node {
                                Node::Map(e) => e.iter().map(|(k, p, _)| (k.clone(), *p)).collect(),
                                _ => Vec::new(),
                            },
                        })
                        .collect(),
                    _ => block_steps(body),
                };
            }
            "outputs" if first_time => {
                index.outputs = match &line.flow {
                    Some(Node::Seq(items)) => items.iter().map(|(p, _)| *p).collect(),
                    _ => {
                        let dash = body.iter().find_map(|l| l.dashes.first().copied());
                        body.iter()
                            .filter(|l| l.dashes.first().copied() == dash && dash.is_some())
                            .map(|l| l.content)
                            .collect()
                    }
                };
            }
            _ => {}
        }
        index.top.push((key.clone(), *pos));
    }
    index
}

/// The items of a block sequence of steps.
fn block_steps(body: &[Line]) -> Vec<StepLoc> {
    let Some(dash) = body.iter().find_map(|l| l.dashes.first().copied()) else {
        return Vec::new();
    };
    let mut steps: Vec<StepLoc> = Vec::new();
    // The column of the current item's keys, once known.
    let mut key_col: Option<u32> = None;
    for line in body {
        if line.dashes.first() == Some(&dash) {
            let mut step = StepLoc::default();
            if line.dashes.len() == 1 {
                if let Some((k, p, col)) = &line.key {
                    step.start = Some(*p);
                    step.keys.push((k.clone(), *p));
                    key_col = Some(*col);
                } else if let Some(Node::Map(entries)) = &line.flow {
                    step.start = Some(line.content);
                    step.keys = entries.iter().map(|(k, p, _)| (k.clone(), *p)).collect();
                    key_col = None;
                } else {
                    // `-` alone: the mapping starts on the next line.
                    key_col = None;
                }
            } else {
                step.start = Some(line.content);
                key_col = Some(u32::MAX);
            }
            steps.push(step);
            continue;
        }
        let Some(step) = steps.last_mut() else {
            continue;
        };
        if !line.dashes.is_empty() {
            continue;
        }
        let Some((k, p, col)) = &line.key else {
            continue;
        };
        if key_col.is_none() && step.start.is_none() && line.indent > dash {
            key_col = Some(*col);
            step.start = Some(*p);
        }
        if key_col == Some(*col) {
            step.keys.push((k.clone(), *p));
        }
    }
    steps
}

// ---------------------------------------------------------------------------------------------
// TOML, from the spanned document parser.

fn toml_document(source: &str, list: &str) -> PlanIndex {
    use toml::de::{DeTable, DeValue};
    let mut index = PlanIndex::default();
    let Ok(doc) = DeTable::parse(source) else {
        return index;
    };
    // Byte offsets, resolved to positions in one pass at the end.
    let mut offsets: Vec<usize> = Vec::new();
    let mut top: Vec<(String, usize)> = Vec::new();
    let mut steps: Vec<(usize, Vec<(String, usize)>)> = Vec::new();
    let mut outputs: Vec<usize> = Vec::new();
    for (k, v) in doc.get_ref() {
        let key = k.get_ref().to_string();
        let off = k.span().start;
        offsets.push(off);
        match (key.as_str(), v.get_ref()) {
            (k, DeValue::Array(items)) if k == list => {
                for item in items.iter() {
                    let start = item.span().start;
                    offsets.push(start);
                    let mut keys = Vec::new();
                    if let DeValue::Table(t) = item.get_ref() {
                        for (sk, _) in t {
                            offsets.push(sk.span().start);
                            keys.push((sk.get_ref().to_string(), sk.span().start));
                        }
                    }
                    // The table's keys are sorted by name; put them back in file order.
                    keys.sort_by_key(|(_, o)| *o);
                    steps.push((start, keys));
                }
            }
            ("outputs", DeValue::Array(items)) => {
                for item in items.iter() {
                    offsets.push(item.span().start);
                    outputs.push(item.span().start);
                }
            }
            _ => {}
        }
        top.push((key, off));
    }
    top.sort_by_key(|(_, o)| *o);
    let at = positions(source, offsets);
    let pos = |o: usize| at(o);
    index.top = top.into_iter().map(|(k, o)| (k, pos(o))).collect();
    index.steps = steps
        .into_iter()
        .map(|(start, keys)| StepLoc {
            start: Some(pos(start)),
            keys: keys.into_iter().map(|(k, o)| (k, pos(o))).collect(),
        })
        .collect();
    index.outputs = outputs.into_iter().map(pos).collect();
    index
}

/// Resolves byte offsets to positions with one pass over the source.
fn positions(source: &str, mut offsets: Vec<usize>) -> impl Fn(usize) -> Pos {
    offsets.sort_unstable();
    offsets.dedup();
    let mut resolved = Vec::with_capacity(offsets.len());
    let mut c = Cur::new(source);
    for off in offsets {
        while c.i < off && !c.eof() {
            c.bump();
        }
        resolved.push((off, c.pos()));
    }
    move |off| match resolved.binary_search_by_key(&off, |(o, _)| *o) {
        Ok(k) => resolved[k].1,
        Err(_) => Pos { line: 1, column: 1 },
    }
}

/// A 1-based line and character column of a byte offset.
pub(crate) fn pos_of_offset(source: &str, offset: usize) -> Pos {
    positions(source, vec![offset])(offset)
}

/// The character column for a parser's 1-based *byte* column on a 1-based line (serde_json
/// counts bytes); at least 1.
pub(crate) fn char_column(source: &str, line: usize, byte_col: usize) -> usize {
    let Some(text) = source.split('\n').nth(line.saturating_sub(1)) else {
        return byte_col.max(1);
    };
    let mut end = byte_col.saturating_sub(1).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].chars().count() + 1
}

/// Whether a JSON value is "nothing": null or a blank string.
pub(crate) fn is_blank(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(ix: &PlanIndex) -> Vec<Option<u32>> {
        ix.steps.iter().map(|s| s.pos().map(|p| p.line)).collect()
    }

    #[test]
    fn yaml_steps_are_found_by_structure_not_by_text() {
        let src = "goal: \"step - id: r is the report\"\nsteps:\n  - id: a\n    module: inspect\n    config: { keywords: [x], id: r }\n  - id: lonely\n    module: inspect\n  - id: r\n    module: report\n    depends_on: [a, ghost]\n";
        let ix = PlanIndex::build(src, PlanFormat::Yaml);
        assert_eq!(lines(&ix), vec![Some(3), Some(6), Some(8)]);
        assert_eq!(ix.top_key("steps").map(|p| p.line), Some(2));
        assert_eq!(
            ix.steps[2].key_nth("depends_on", 0),
            Some(Pos {
                line: 10,
                column: 5
            })
        );
    }

    #[test]
    fn yaml_block_scalars_comments_and_indentless_lists() {
        let src = "# a plan\nsteps:\n- id: a   # first\n  module: execute\n  config:\n    script: |\n      - id: fake\n      id: fake\n  description: >-\n    id: no\n-\n  module: report\n  id: \"b c\"\noutputs:\n- a\n- 'b c'\n";
        let ix = PlanIndex::build(src, PlanFormat::Yaml);
        assert_eq!(lines(&ix), vec![Some(3), Some(13)]);
        assert_eq!(
            ix.outputs.iter().map(|p| p.line).collect::<Vec<_>>(),
            vec![15, 16]
        );
        assert_eq!(
            ix.steps[0].key_nth("description", 0).map(|p| p.line),
            Some(9)
        );
    }

    #[test]
    fn yaml_flow_steps_and_flow_items() {
        let ix = PlanIndex::build(
            "steps:\n  - {id: a, module: inspect}\n  - {module: report, id: r, depends_on: [a]}\n",
            PlanFormat::Yaml,
        );
        assert_eq!(lines(&ix), vec![Some(2), Some(3)]);
        assert_eq!(ix.steps[1].key_nth("id", 0).map(|p| p.column), Some(22));
        let ix = PlanIndex::build(
            "steps: [\n  {id: a, module: inspect},\n  {id: 'r', module: report}]\noutputs: [r]\n",
            PlanFormat::Yaml,
        );
        assert_eq!(lines(&ix), vec![Some(2), Some(3)]);
        assert_eq!(
            ix.outputs,
            vec![Pos {
                line: 4,
                column: 11
            }]
        );
        let ix = PlanIndex::build("{steps: [{id: a}, {id: b}]}", PlanFormat::Yaml);
        assert_eq!(ix.steps.len(), 2);
    }

    #[test]
    fn json_steps_are_objects_of_the_steps_array() {
        let src = "{\"goal\": \"{\\\"id\\\": \\\"x\\\"}\", \"steps\": [\n {\"id\": \"a\", \"config\": {\"id\": \"z\"}},\n {\"module\": \"x\",\n  \"id\": \"b\"}]}";
        let ix = PlanIndex::build(src, PlanFormat::Json);
        assert_eq!(lines(&ix), vec![Some(2), Some(4)]);
        assert_eq!(ix.steps[0].keys.len(), 2);
    }

    #[test]
    fn toml_array_of_tables_and_inline_tables() {
        let src = "goal = \"g\"\n[[steps]]\nmodule = \"x\"\nid = \"a\"\n[steps.config]\nid = \"no\"\n[[steps]]\nid = \"b\"\n";
        let ix = PlanIndex::build(src, PlanFormat::Toml);
        assert_eq!(lines(&ix), vec![Some(4), Some(8)]);
        let src =
            "steps = [\n  { id = \"a\", module = \"x\" },\n  { module = \"y\", id = \"é\" },\n]\n";
        let ix = PlanIndex::build(src, PlanFormat::Toml);
        assert_eq!(lines(&ix), vec![Some(2), Some(3)]);
        assert_eq!(ix.steps[1].key_nth("id", 0).map(|p| p.column), Some(19));
    }

    #[test]
    fn columns_count_characters() {
        assert_eq!(char_column("{\"goal\": \"ééé\" x}", 1, 19), 16);
        assert_eq!(char_column("", 1, 0), 1);
        assert_eq!(pos_of_offset("é\néé x", 8), Pos { line: 2, column: 4 });
    }
}
