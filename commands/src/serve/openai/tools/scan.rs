//! One call object, `{"name": ..., "arguments": ...}` (or `"parameters"`, keys in any order), read as
//! its text arrives: the name once it is complete, then the arguments' text as it grows.

/// What [`CallScan::feed`] found.
#[derive(Debug, PartialEq)]
pub enum Scanned {
    /// All the input belongs to the object, which is not closed yet.
    Open,
    /// The object closed after this many bytes of the input.
    Closed(usize),
    /// The input is not a call object (from this many bytes of the input on).
    Malformed(usize),
}

/// Where the scan is at the object's top level.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Slot {
    /// Before a key (or the closing brace).
    Key,
    /// Inside a key.
    InKey,
    /// After a key, before its colon.
    Colon,
    /// After a colon, before the value.
    Value,
    /// Inside a value.
    InValue,
    /// After a value, before a comma or the closing brace.
    After,
}

/// The top-level fields that matter.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Field {
    Name,
    Arguments,
    Other,
}

/// A call object being read.
#[derive(Debug)]
pub struct CallScan {
    /// The object's text so far, from its `{`.
    raw: String,
    /// Nesting depth: 1 inside the object, more inside a nested value.
    depth: usize,
    /// Inside a string (of any depth), and just after a backslash in it.
    string: bool,
    escaped: bool,
    slot: Slot,
    /// Where the current key or value starts in `raw`.
    start: usize,
    /// The field whose value is being read.
    field: Field,
    /// Whether the value being read is a primitive (ends at a delimiter).
    primitive: bool,
    /// The function's name, once read.
    name: Option<String>,
    /// Where the arguments' value starts and, once read, ends in `raw`.
    arguments: Option<(usize, Option<usize>)>,
}

impl CallScan {
    /// A scan at the object's opening `{` (not yet fed).
    pub fn new() -> Self {
        CallScan {
            raw: String::new(),
            depth: 0,
            string: false,
            escaped: false,
            slot: Slot::Key,
            start: 0,
            field: Field::Other,
            primitive: false,
            name: None,
            arguments: None,
        }
    }

    /// The object's text so far.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The function's name, once read.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The function's name as far as it was read: whole once complete, else what its string holds so far
    /// (an escape cut short left out), empty before its string starts.
    pub fn name_so_far(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        if !(self.slot == Slot::InValue && self.field == Field::Name && self.string) {
            return String::new();
        }
        let text = &self.raw[self.start..];
        (1..=text.len())
            .rev()
            .filter(|&end| text.is_char_boundary(end))
            .take(7)
            .find_map(|end| serde_json::from_str::<String>(&format!("{}\"", &text[..end])).ok())
            .unwrap_or_default()
    }

    /// The arguments' text read so far from byte `from` on, while they are an object or array (written
    /// out as they arrive); `None` before they start, or when they are another value (see [`Self::arguments`]).
    pub fn arguments_from(&self, from: usize) -> Option<&str> {
        let (start, end) = self.arguments?;
        let end = end.unwrap_or(self.raw.len());
        matches!(self.raw.as_bytes()[start], b'{' | b'[').then(|| &self.raw[(start + from).min(end)..end])
    }

    /// The arguments once the object closed: their JSON text, a string's contents (arguments sent as a
    /// JSON-encoded string), or `{}` when there were none.
    pub fn arguments(&self) -> String {
        match self.arguments {
            Some((start, Some(end))) => {
                let text = &self.raw[start..end];
                serde_json::from_str::<String>(text).unwrap_or_else(|_| text.to_string())
            }
            _ => "{}".to_string(),
        }
    }

    /// Reads more of the object (the first byte fed must be its `{`).
    pub fn feed(&mut self, input: &str) -> Scanned {
        let base = self.raw.len();
        self.raw.push_str(input);
        for (i, b) in input.bytes().enumerate() {
            match self.byte(b, base + i) {
                Ok(false) => {}
                Ok(true) => {
                    self.raw.truncate(base + i + 1);
                    return Scanned::Closed(i + 1);
                }
                Err(()) => {
                    // A byte that is not JSON structure here starts a character: `base + i` is a boundary.
                    self.raw.truncate(base + i);
                    return Scanned::Malformed(i);
                }
            }
        }
        Scanned::Open
    }

    /// Takes byte `b` at offset `at` of the object; `Ok(true)` when it closes the object.
    fn byte(&mut self, b: u8, at: usize) -> Result<bool, ()> {
        if self.depth == 0 {
            return if b == b'{' {
                self.depth = 1;
                Ok(false)
            } else {
                Err(())
            };
        }
        let ws = b.is_ascii_whitespace();
        match self.slot {
            Slot::Key if ws => {}
            Slot::Key if b == b'"' => {
                (self.slot, self.start, self.string) = (Slot::InKey, at, true);
            }
            Slot::Key | Slot::After if b == b'}' => return if self.name.is_some() { Ok(true) } else { Err(()) },
            Slot::InKey => {
                if self.in_string(b) {
                    return Ok(false);
                }
                self.field = match serde_json::from_str::<String>(&self.raw[self.start..=at]).as_deref() {
                    Ok("name") => Field::Name,
                    Ok("arguments" | "parameters") => Field::Arguments,
                    _ => Field::Other,
                };
                self.slot = Slot::Colon;
            }
            Slot::Colon if ws => {}
            Slot::Colon if b == b':' => self.slot = Slot::Value,
            Slot::Value if ws => {}
            Slot::Value => {
                (self.slot, self.start, self.primitive) = (Slot::InValue, at, false);
                match b {
                    b'"' => self.string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'-' | b'0'..=b'9' | b'a'..=b'z' => self.primitive = true,
                    _ => return Err(()),
                }
                if self.field == Field::Arguments {
                    self.arguments = Some((at, None));
                }
            }
            Slot::InValue if self.primitive => {
                if ws || b == b',' || b == b'}' {
                    self.value_done(at)?;
                    return self.byte(b, at);
                }
                if !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-')) {
                    return Err(());
                }
            }
            Slot::InValue => {
                if self.string {
                    if !self.in_string(b) && self.depth == 1 {
                        self.value_done(at + 1)?;
                    }
                    return Ok(false);
                }
                match b {
                    b'"' => self.string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 1 {
                            self.value_done(at + 1)?;
                        }
                    }
                    _ => {}
                }
            }
            Slot::After if ws => {}
            Slot::After if b == b',' => self.slot = Slot::Key,
            Slot::Key | Slot::Colon | Slot::After => return Err(()),
        }
        Ok(false)
    }

    /// Takes a byte inside a string; whether the string goes on after it.
    fn in_string(&mut self, b: u8) -> bool {
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.string = false;
        }
        self.string
    }

    /// The value that started at `self.start` ended before offset `end`.
    fn value_done(&mut self, end: usize) -> Result<(), ()> {
        self.slot = Slot::After;
        match self.field {
            Field::Name => {
                let text = self.raw.get(self.start..end).ok_or(())?;
                self.name = Some(serde_json::from_str::<String>(text).map_err(|_| ())?);
            }
            Field::Arguments => self.arguments = Some((self.start, Some(end))),
            Field::Other => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_so_far_is_what_its_string_holds() {
        let cases = [
            ("{", ""),
            ("{\"na", ""),
            ("{\"name\": ", ""),
            ("{\"name\": \"", ""),
            ("{\"name\": \"get_w", "get_w"),
            ("{\"name\": \"a\\", "a"),
            ("{\"name\": \"a\\u00e", "a"),
            ("{\"name\": \"a\\u00e9b", "a\u{e9}b"),
            ("{\"name\": \"f\", \"argu", "f"),
            ("{\"arguments\": {\"name\": \"x", ""),
        ];
        for (text, name) in cases {
            let mut scan = CallScan::new();
            assert_eq!(scan.feed(text), Scanned::Open, "{text:?}");
            assert_eq!(scan.name_so_far(), name, "{text:?}");
        }
    }
}
