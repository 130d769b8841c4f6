//! A tiny blocking HTTP/1.1 client for the tests: one request per connection (`Connection: close`,
//! `Content-Type: application/json` on POSTs unless given), chunked bodies decoded, server-sent events split.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// A response.
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The (de-chunked) body.
    pub body: Vec<u8>,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `data:` payloads of a server-sent event stream (named or not).
    pub fn events(&self) -> Vec<String> {
        let text = self.text();
        assert!(text.ends_with("\n\n"), "stream not terminated by a blank line: {text:?}");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let data = e.split_once('\n').filter(|(name, _)| name.starts_with("event: ")).map_or(e, |(_, d)| d);
                data.strip_prefix("data: ").unwrap_or_else(|| panic!("not a data event: {e:?}")).to_string()
            })
            .collect()
    }

    /// The named events of a server-sent event stream (Anthropic's, OpenAI Responses'): each `event:` name and
    /// its `data:` as JSON.
    pub fn named_events(&self) -> Vec<(String, Value)> {
        let text = self.text();
        assert!(text.ends_with("\n\n"), "stream not terminated by a blank line: {text:?}");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap_or_else(|| panic!("not a named event: {e:?}"));
                let name = name.strip_prefix("event: ").unwrap_or_else(|| panic!("no event name: {e:?}"));
                let data = data.strip_prefix("data: ").unwrap_or_else(|| panic!("no data: {e:?}"));
                (name.to_string(), serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    /// The stream's events parsed as JSON (`[DONE]` left out).
    pub fn json_events(&self) -> Vec<Value> {
        self.events().iter().filter(|e| *e != "[DONE]").map(|e| serde_json::from_str(e).unwrap()).collect()
    }
}

/// Sends a request and returns the open connection.
pub fn send(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    if method == "POST" && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    s
}

/// Sends a request and reads the whole response.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut s = send(addr, method, path, headers, body);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse(&raw)
}

/// Sends `raw` bytes as they are and reads the whole response (the server must close the connection).
pub fn raw(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    parse(&out)
}

/// `POST path` with a JSON body.
pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Reply {
    let body = serde_json::to_vec(body).unwrap();
    request(addr, "POST", path, &[("Content-Type", "application/json")], &body)
}

/// `GET path`.
pub fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, &[], b"")
}

/// Parses a complete HTTP/1.1 response.
pub fn parse(raw: &[u8]) -> Reply {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v == "chunked") {
        body = dechunk(&body);
    }
    Reply { status, headers, body }
}

/// Decodes a chunked body.
fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = data.windows(2).position(|w| w == b"\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&data[..eol]).unwrap().trim(), 16).unwrap();
        data = &data[eol + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}
