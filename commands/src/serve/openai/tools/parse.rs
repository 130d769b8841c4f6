//! Tool calls read out of the model's output as it streams: text outside the call markup is content,
//! each call is announced once its function name is known and its arguments follow as they arrive.
//! Text that may still become markup (a marker's first characters) is held back; markup that turns out
//! not to be a call is given back as content. An output cut short (by `max_tokens` or a stop string)
//! inside a call's markup ends with that call as far as it got: its name so far (empty before it starts)
//! and its arguments so far; a forced answer's output is a call from its first character.

use super::format::{Syntax, ToolCallFormat};
use super::scan::{CallScan, Scanned};

/// A stretch of the output, as the parser tells it apart.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    /// Text of the answer (`content`).
    Content(String),
    /// Call `index` (0, 1, ... in order) begins, of this function.
    Call {
        /// Its position among the answer's calls.
        index: usize,
        /// The function's name.
        name: String,
    },
    /// More of call `index`'s arguments (JSON text).
    Arguments {
        /// The call.
        index: usize,
        /// The new text.
        text: String,
    },
}

/// What is expected inside a section of calls.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// The section's opening punctuation (Mistral's `[`).
    Begin,
    /// A call object.
    Call,
    /// A separator, the section's end, or anything else (which ends it).
    After,
}

/// Where the parser is.
#[derive(Debug)]
enum State {
    /// At the start of the output, where a section may open without a marker.
    Start,
    /// In content.
    Text,
    /// In a section, between its parts.
    Section(Expect),
    /// In a call object.
    Call(CallScan),
}

/// How an answer is read for tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// The family's format.
    pub format: ToolCallFormat,
    /// Whether a grammar forced calls (`required`, a named function): the output is calls from its start.
    pub forced: bool,
}

/// An incremental tool-call parser for one answer.
#[derive(Debug)]
pub struct ToolCallParser {
    syntax: &'static Syntax,
    /// Whether the output is calls from its start (then text held back as a possible marker is markup).
    forced: bool,
    state: State,
    /// Text received and not yet decided.
    pending: String,
    /// Text of the current section not yet known to hold a call, given back as content if it holds none.
    held: String,
    /// Whitespace at the end of the content so far, sent once more content follows (dropped before calls).
    space: String,
    /// Calls announced so far.
    calls: usize,
    /// Bytes of the current call's arguments sent.
    sent: usize,
    /// Whether a call is announced and not yet closed.
    open: bool,
    /// Whether the current section announced a call (else `held` is content if the section ends).
    confirmed: bool,
}

impl ToolCallParser {
    /// A parser for an output read this way.
    pub fn new(reading: Reading) -> Self {
        let syntax = reading.format.syntax();
        let state = if syntax.at_start_only { State::Start } else { State::Text };
        ToolCallParser {
            syntax,
            forced: reading.forced,
            state,
            pending: String::new(),
            held: String::new(),
            space: String::new(),
            calls: 0,
            sent: 0,
            open: false,
            confirmed: false,
        }
    }

    /// Calls announced so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Whether the last call announced is still open (its output was cut short).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Reads more output.
    pub fn feed(&mut self, text: &str) -> Vec<Piece> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        while self.step(false, &mut out) {}
        out
    }

    /// Ends the output, `cut` short (by its length or a stop string) or not: what was held back is decided.
    pub fn finish(&mut self, cut: bool) -> Vec<Piece> {
        let mut out = Vec::new();
        if cut {
            self.cut(&mut out);
        }
        while self.step(true, &mut out) {}
        if let State::Call(scan) = &self.state {
            if !self.open {
                let raw = scan.raw().to_string();
                self.held.push_str(&raw);
            }
        }
        self.give_back(&mut out);
        if self.calls == 0 {
            let space = std::mem::take(&mut self.space);
            push_content(&mut out, space);
        }
        out
    }

    /// The output was cut short: a call it began is announced as far as it got (its name so far, its
    /// arguments so far), and stays open. A call begins with its section's marker or the separator before
    /// it, and in a forced answer with a marker's first characters.
    fn cut(&mut self, out: &mut Vec<Piece>) {
        match std::mem::replace(&mut self.state, State::Text) {
            State::Call(scan) if !self.open => {
                self.announce(scan.name_so_far(), out);
                if let Some(args) = scan.arguments_from(0).filter(|a| !a.is_empty()) {
                    out.push(Piece::Arguments { index: self.calls - 1, text: args.to_string() });
                }
            }
            State::Section(Expect::Begin | Expect::Call) => {
                self.pending.clear();
                self.announce(String::new(), out);
            }
            State::Start | State::Text if self.forced && !self.pending.trim().is_empty() => {
                self.pending.clear();
                self.announce(String::new(), out);
            }
            state => self.state = state,
        }
    }

    /// Decides what it can of `pending`; whether to go on.
    fn step(&mut self, end: bool, out: &mut Vec<Piece>) -> bool {
        if self.pending.is_empty() {
            return match self.state {
                // At the end, an unfinished section (or its last separator) is decided.
                State::Section(Expect::Begin | Expect::Call) if end && !self.confirmed => {
                    self.give_back(out);
                    true
                }
                _ => false,
            };
        }
        match std::mem::replace(&mut self.state, State::Text) {
            State::Start => self.start(end),
            State::Text => self.text(end, out),
            State::Section(expect) => self.section(expect, end, out),
            State::Call(scan) => self.call(scan, out),
        }
    }

    /// At the start: a marker, a bare call object, or content.
    fn start(&mut self, end: bool) -> bool {
        let trimmed = self.pending.trim_start();
        if trimmed.is_empty() && !end {
            self.state = State::Start;
            return false;
        }
        if self.syntax.bare_object && trimmed.starts_with('{') {
            let lead = self.pending.len() - trimmed.len();
            let held = self.pending.drain(..lead).collect();
            self.open_section(held, Expect::Call);
            return true;
        }
        match marker_at(self.syntax, trimmed) {
            Match::Full(len) => {
                let lead = self.pending.len() - trimmed.len() + len;
                let held = self.pending.drain(..lead).collect();
                self.open_section(held, self.first());
            }
            Match::Partial if !end => {
                self.state = State::Start;
                return false;
            }
            _ => self.state = State::Text,
        }
        true
    }

    /// In content: up to the next marker (when markers count here), holding back a possible marker start.
    fn text(&mut self, end: bool, out: &mut Vec<Piece>) -> bool {
        if self.syntax.at_start_only {
            let text = std::mem::take(&mut self.pending);
            self.content(&text, out);
            return false;
        }
        let found =
            (0..self.pending.len()).filter(|&i| self.pending.is_char_boundary(i)).find_map(|i| {
                match marker_at(self.syntax, &self.pending[i..]) {
                    Match::Full(len) => Some((i, Some(len))),
                    Match::Partial if !end => Some((i, None)),
                    _ => None,
                }
            });
        match found {
            Some((at, Some(len))) => {
                let before: String = self.pending.drain(..at).collect();
                self.content(&before, out);
                let held = self.pending.drain(..len).collect();
                self.open_section(held, self.first());
                true
            }
            Some((at, None)) => {
                let before: String = self.pending.drain(..at).collect();
                self.content(&before, out);
                false
            }
            None => {
                let text = std::mem::take(&mut self.pending);
                self.content(&text, out);
                false
            }
        }
    }

    /// Between the parts of a section.
    fn section(&mut self, expect: Expect, end: bool, out: &mut Vec<Piece>) -> bool {
        let lead = self.pending.len() - self.pending.trim_start().len();
        self.held.extend(self.pending.drain(..lead));
        self.state = State::Section(expect);
        if self.pending.is_empty() {
            return end;
        }
        let rest = self.pending.as_str();
        let (punctuation, next) = match expect {
            Expect::Begin => (self.syntax.begin, Expect::Call),
            Expect::Call if rest.starts_with('{') => {
                self.state = State::Call(CallScan::new());
                return true;
            }
            Expect::Call => {
                self.give_back(out);
                return true;
            }
            Expect::After => match (self.syntax.separator, self.syntax.close) {
                (Some(sep), _) if rest.starts_with(sep) => (Some(sep), Expect::Call),
                (_, Some(close)) if rest.starts_with(close) => {
                    self.pending.drain(..close.len());
                    self.held.clear();
                    self.state = State::Text;
                    return true;
                }
                (sep, close) if [sep, close].into_iter().flatten().any(|p| p.starts_with(rest)) => {
                    if end {
                        // The output ends inside the markup after a call: it is dropped.
                        self.pending.clear();
                        self.held.clear();
                        self.state = State::Text;
                    }
                    return end;
                }
                _ => {
                    self.held.clear();
                    self.state = State::Text;
                    return true;
                }
            },
        };
        match punctuation {
            Some(p) if rest.starts_with(p) => {
                self.held.extend(self.pending.drain(..p.len()));
                self.state = State::Section(next);
                true
            }
            Some(p) if !end && p.starts_with(rest) => false,
            _ => {
                self.give_back(out);
                true
            }
        }
    }

    /// Inside a call object.
    fn call(&mut self, mut scan: CallScan, out: &mut Vec<Piece>) -> bool {
        let input = std::mem::take(&mut self.pending);
        let scanned = scan.feed(&input);
        if !self.open {
            if let Some(name) = scan.name() {
                self.announce(name.to_string(), out);
            }
        }
        if self.open {
            if let Some(args) = scan.arguments_from(self.sent).filter(|a| !a.is_empty()) {
                self.sent += args.len();
                out.push(Piece::Arguments { index: self.calls - 1, text: args.to_string() });
            }
        }
        match scanned {
            Scanned::Open => {
                self.state = State::Call(scan);
                false
            }
            Scanned::Closed(used) => {
                if self.sent == 0 {
                    out.push(Piece::Arguments { index: self.calls - 1, text: scan.arguments() });
                }
                self.open = false;
                self.pending = input[used..].to_string();
                self.state = State::Section(Expect::After);
                true
            }
            Scanned::Malformed(used) => {
                self.pending = input[used..].to_string();
                if self.open {
                    // An announced call whose object breaks off: it ends there, the rest is content.
                    self.open = false;
                    self.state = State::Text;
                } else {
                    self.held.push_str(scan.raw());
                    self.give_back(out);
                }
                true
            }
        }
    }

    /// A call begins: the whitespace and section text before it are dropped.
    fn announce(&mut self, name: String, out: &mut Vec<Piece>) {
        self.space.clear();
        self.held.clear();
        (self.open, self.confirmed, self.sent) = (true, true, 0);
        out.push(Piece::Call { index: self.calls, name });
        self.calls += 1;
    }

    /// The section ends where no call follows: its text is content unless it announced a call, and the
    /// parser goes back to content.
    fn give_back(&mut self, out: &mut Vec<Piece>) {
        let held = std::mem::take(&mut self.held);
        if !self.confirmed {
            self.content(&held, out);
        }
        self.state = State::Text;
    }

    /// A section opens with `held` (its marker and what came before it that belongs to it).
    fn open_section(&mut self, held: String, expect: Expect) {
        (self.held, self.confirmed) = (held, false);
        self.state = State::Section(expect);
    }

    /// What the section expects after its marker.
    fn first(&self) -> Expect {
        if self.syntax.begin.is_some() {
            Expect::Begin
        } else {
            Expect::Call
        }
    }

    /// Sends content, holding back its trailing whitespace until more content follows.
    fn content(&mut self, text: &str, out: &mut Vec<Piece>) {
        let body = text.trim_end();
        if body.is_empty() {
            self.space.push_str(text);
            return;
        }
        let mut sent = std::mem::take(&mut self.space);
        sent.push_str(body);
        self.space = text[body.len()..].to_string();
        push_content(out, sent);
    }
}

/// Appends content, merged with content just before it.
fn push_content(out: &mut Vec<Piece>, text: String) {
    if text.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(Piece::Content(last)) => last.push_str(&text),
        _ => out.push(Piece::Content(text)),
    }
}

/// How `text` starts relative to the section markers.
enum Match {
    /// With a whole marker of this many bytes.
    Full(usize),
    /// With the start of a marker (all of `text` is one).
    Partial,
    /// With no marker.
    None,
}

/// Whether `text` starts with a marker of `syntax`.
fn marker_at(syntax: &Syntax, text: &str) -> Match {
    if let Some(m) = syntax.open.iter().find(|m| text.starts_with(**m)) {
        return Match::Full(m.len());
    }
    if syntax.open.iter().any(|m| m.starts_with(text)) {
        Match::Partial
    } else {
        Match::None
    }
}

#[cfg(test)]
mod tests;
