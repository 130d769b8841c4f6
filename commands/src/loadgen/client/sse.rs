//! An incremental server-sent-events reader: bytes in as they arrive, `data:` payloads out.

/// Splits a byte stream into SSE events and yields each event's data (multi-line data joined by `\n`).
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds `bytes`; returns the data of every event completed by them, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line[..line.len() - 1]);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if line.is_empty() {
                out.extend(self.data.take());
            } else if let Some(d) = line.strip_prefix("data:") {
                let d = d.strip_prefix(' ').unwrap_or(d);
                match &mut self.data {
                    Some(acc) => {
                        acc.push('\n');
                        acc.push_str(d);
                    }
                    None => self.data = Some(d.to_string()),
                }
            }
            // Comments (":"), event:, id: and retry: lines carry nothing a benchmark needs.
        }
        out
    }

    /// At the end of the stream: the data of a last event not followed by a blank line.
    pub fn finish(&mut self) -> Option<String> {
        if !self.buf.is_empty() {
            // A line without its newline: terminate it (it cannot end an event by itself).
            self.feed(b"\n");
        }
        self.data.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: {\"a\"").is_empty());
        assert_eq!(p.feed(b":1}\n\n: comment\n\ndata:x\r\ndata:y\r\n\r\ndata: [DONE]\n"), vec!["{\"a\":1}", "x\ny"]);
        assert_eq!(p.finish().as_deref(), Some("[DONE]"));
        assert_eq!(p.finish(), None);
        let mut q = SseParser::default();
        q.feed(b"data: tail");
        assert_eq!(q.finish().as_deref(), Some("tail"));
    }
}
