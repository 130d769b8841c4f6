//! In-process mode: `tgi bench --model M` runs `tgi serve` (this same executable) on a free loopback port,
//! waits until it is healthy, and stops it at the end, on error and on Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// The child server, where the Ctrl-C hook can reach it.
static CHILD: Mutex<Option<Child>> = Mutex::new(None);

/// A running `tgi serve` child; stopped when dropped.
pub struct LocalServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The last lines it wrote to stderr.
    log: Arc<Mutex<Vec<String>>>,
}

/// Stops the child (SIGKILL) and reaps it; safe to call more than once.
fn stop_child() {
    if let Some(mut c) = CHILD.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl LocalServer {
    /// Starts `tgi serve --model MODEL --hostname 127.0.0.1 --port 0 EXTRA...`, reads back the port it reports,
    /// and waits up to `wait` for `/health`.
    pub fn start(model: Option<&str>, extra: &[String], wait: Duration, quiet: bool) -> Result<LocalServer> {
        let exe = std::env::current_exe().context("cannot find the tgi executable")?;
        let mut cmd = Command::new(exe);
        cmd.arg("serve");
        if let Some(m) = model {
            cmd.args(["--model", m]);
        }
        // Port 0: the kernel picks a free port, which the server's `listening on` line names (a port chosen
        // here and handed over could be taken by another process in between).
        cmd.args(["--hostname", "127.0.0.1", "--port", "0"]).args(extra);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start tgi serve")?;
        let stderr = child.stderr.take().expect("piped");
        *CHILD.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        crate::output::add_interrupt_hook(stop_child);
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let (port_tx, port_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(port) = crate::serve::listening_port(&line) {
                    let _ = port_tx.send(port);
                }
                let mut l = sink.lock().unwrap_or_else(|e| e.into_inner());
                if l.len() >= 20 {
                    l.remove(0);
                }
                l.push(line);
            }
        });
        if !quiet {
            eprintln!("tgi bench: starting tgi serve {}", model.unwrap_or("(bundled model)"));
        }
        let mut server = LocalServer { url: String::new(), log };
        let port = server.wait_healthy(&port_rx, wait)?;
        server.url = format!("http://127.0.0.1:{port}");
        if !quiet {
            eprintln!("tgi bench: tgi serve is ready on {}", server.url);
        }
        Ok(server)
    }

    /// Waits up to `wait` for the child to say on which port it listens and for `/health` there; the port.
    fn wait_healthy(&self, ports: &mpsc::Receiver<u16>, wait: Duration) -> Result<u16> {
        let t = Instant::now();
        let mut port = None;
        loop {
            if let Some(status) =
                CHILD.lock().unwrap_or_else(|e| e.into_inner()).as_mut().and_then(|c| c.try_wait().ok().flatten())
            {
                anyhow::bail!("tgi serve exited ({status}) before it was ready:\n{}", self.log_tail());
            }
            port = port.or_else(|| ports.try_recv().ok());
            if let Some(p) = port.filter(|&p| health(p)) {
                return Ok(p);
            }
            if t.elapsed() > wait {
                anyhow::bail!(
                    "tgi serve was not healthy after {:.0} s (see --serve-timeout):\n{}",
                    wait.as_secs_f64(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The child's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        CHILD.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(Child::id)
    }

    /// The child's peak resident memory so far (VmHWM in /proc/PID/status), KiB; `None` off Linux.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status.lines().find_map(|l| l.strip_prefix("VmHWM:")?.trim().strip_suffix("kB")?.trim().parse().ok())
    }

    /// What the server last wrote to stderr.
    pub fn log_tail(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).join("\n")
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        stop_child();
    }
}

/// Whether `GET /health` on the port answers 200 (a blocking probe with short timeouts).
fn health(port: u16) -> bool {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}
