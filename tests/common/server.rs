//! A running `tgi serve` for end-to-end tests, and a small HTTP client (ureq) with SSE reading.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A `tgi serve` child process on a free loopback port, killed when dropped.
pub struct Server {
    child: Option<Child>,
    /// The port it listens on.
    pub port: u16,
    /// Everything it wrote to stderr so far.
    pub log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `tgi serve ARGS --port 0` and waits until it says it is listening, and on which port (the
    /// kernel chose it: no other test can take it in between).
    pub fn start(args: &[&str]) -> Server {
        Self::start_with_env(args, &[])
    }

    /// As [`Server::start`], with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tgi"));
        cmd.arg("serve").args(args).args(["--port", "0"]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn tgi serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(port) = tgi_commands::serve::listening_port(&line) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(port);
                    }
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let mut server = Server { child: Some(child), port: 0, log };
        match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(port) => server.port = port,
            Err(_) => {
                let status = server.child.as_mut().unwrap().try_wait().unwrap();
                panic!(
                    "tgi serve did not say `listening on` within 300 s ({status:?}): {}",
                    server.log.lock().unwrap()
                );
            }
        }
        server
    }

    /// Runs `tests/python/SCRIPT` against this server (its URL first, then `args`) and returns what it printed;
    /// panics with its output and the server's log unless it exits 0 having printed `done`.
    pub fn run_python(&self, script: &str, args: &[&std::ffi::OsStr], done: &str) -> String {
        let out = Command::new("python3")
            .arg(super::root().join("tests/python").join(script))
            .arg(self.url(""))
            .args(args)
            .output()
            .expect("run python3");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && stdout.contains(done),
            "{script} failed:\n{stdout}\n{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log.lock().unwrap()
        );
        stdout
    }

    /// The process's peak resident memory so far in bytes (`VmHWM`), where /proc tells.
    pub fn peak_rss(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let pid = self.child.as_ref().unwrap().id();
        let ok = Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success();
        assert!(ok, "kill -TERM {pid}");
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait(mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let t = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if t.elapsed() > timeout {
                let _ = child.kill();
                panic!("tgi serve did not exit within {timeout:?}: {}", self.log.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A gauge or counter from `/metrics` (first sample whose line starts with `name`).
    pub fn metric(&self, name: &str) -> f64 {
        let (status, text) = get(&self.url("/metrics"));
        assert_eq!(status, 200);
        metric_value(&text, name).unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The value of the first sample of `name` (exact metric name, any labels) in Prometheus text.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (key, value) = l.rsplit_once(' ')?;
        let base = key.split('{').next()?;
        (base == name).then(|| value.parse().ok()).flatten()
    })
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout_read(Duration::from_secs(120)).build()
}

fn finish(r: Result<ureq::Response, ureq::Error>) -> (u16, String) {
    match r {
        Ok(resp) => (resp.status(), resp.into_string().unwrap()),
        Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap()),
        Err(e) => panic!("transport error: {e}"),
    }
}

/// GET `url`: status and body.
pub fn get(url: &str) -> (u16, String) {
    finish(agent().get(url).call())
}

/// POST `body` (JSON) to `url`: status and body.
pub fn post(url: &str, body: &str) -> (u16, String) {
    finish(agent().post(url).set("Content-Type", "application/json").send_string(body))
}

/// POST with extra headers: status, the response headers asked for, body.
pub fn post_with(url: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut req = agent().post(url).set("Content-Type", "application/json");
    for (k, v) in headers {
        req = req.set(k, v);
    }
    finish(req.send_string(body))
}

/// POST `body` and parse the JSON answer, asserting `status`.
pub fn post_json(url: &str, body: &Value, status: u16) -> Value {
    let (s, text) = post(url, &body.to_string());
    assert_eq!(s, status, "{url}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// An open server-sent-event stream.
pub struct Sse {
    reader: BufReader<Box<dyn Read + Send + Sync>>,
    /// The response status.
    pub status: u16,
}

impl Sse {
    /// POSTs `body` to `url` and opens the event stream.
    pub fn open(url: &str, body: &Value) -> Sse {
        Self::open_with(url, &[], body)
    }

    /// As [`Sse::open`], with extra headers.
    pub fn open_with(url: &str, headers: &[(&str, &str)], body: &Value) -> Sse {
        let mut req = agent().post(url).set("Content-Type", "application/json");
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let r = req.send_string(&body.to_string());
        let resp = match r {
            Ok(resp) => resp,
            Err(ureq::Error::Status(_, resp)) => resp,
            Err(e) => panic!("transport error: {e}"),
        };
        Sse { status: resp.status(), reader: BufReader::new(resp.into_reader()) }
    }

    /// The next `data:` payload, or `None` at the end of the stream.
    pub fn next_data(&mut self) -> Option<String> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if let Some(d) = line.strip_prefix("data:") {
                return Some(d.trim().to_string());
            }
        }
    }

    /// Every remaining `data:` payload.
    pub fn collect(mut self) -> Vec<String> {
        std::iter::from_fn(|| self.next_data()).collect()
    }
}
