"""Three `tgi serve` replicas, each in its own network namespace (ip netns + a veth pair on private
10.200.x.y addresses), behind Debian's HAProxy running deploy/haproxy/haproxy.cfg unchanged.

Used by scale_out.py (the CI test) and measure.py (the figures in the README). Needs root, `ip`
and `haproxy`; everything it creates is removed on exit.
"""

import csv
import io
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HAPROXY_CFG = os.path.join(ROOT, "deploy", "haproxy", "haproxy.cfg")
# The line `tgi serve` logs once the model is loaded, as text or inside a JSON log line.
LISTENING = re.compile(r'listening on http://[^\s"]+:(\d+)')


def missing_prerequisites():
    """What this machine lacks to run the replicas (empty when nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (for ip netns)")
    for tool in ("ip", "haproxy"):
        if shutil.which(tool) is None:
            missing.append(tool)
    return missing


def unassigned_port():
    """A port free on 127.0.0.1 now, below the kernel's ephemeral range: the kernel never hands those out
    (to a bind to port 0 or to an outgoing connection), so only a process naming it can take it."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    ports = list(range(max(1024, low - 20000), low))
    random.shuffle(ports)
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 below the ephemeral range, which starts at {low}")


def log_tail(path, chars=4000):
    """The end of the file at `path`, for a failure message."""
    with open(path, errors="replace") as f:
        return f.read()[-chars:]


def listening_port(proc, log_path, what="tgi serve", timeout=300.0):
    """The port that `tgi serve --port 0`, running as `proc` with its stderr in `log_path`, listens on,
    from its `listening on` log line; fails with the log if it exits first or has not started in time."""
    deadline = time.monotonic() + timeout
    while True:
        with open(log_path, errors="replace") as f:
            found = LISTENING.search(f.read())
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening:\n{log_tail(log_path)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not log `listening on` within {timeout:.0f} s:\n{log_tail(log_path)}")
        time.sleep(0.1)


def http(url, body=None, headers=None, timeout=30, response_headers=None):
    """(status, text) of a GET, or of a POST of `body` as JSON; the response's headers go into
    `response_headers` (a dict) when given."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if response_headers is not None:
                response_headers.update(r.headers)
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def metric(base, name):
    """The first sample of `name` in base/metrics (None when unreachable)."""
    status, text = http(base + "/metrics", timeout=5)
    if status != 200:
        return None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(f"{name} not in {base}/metrics")


def wait_until(what, ok, timeout=120.0, detail=None):
    """Polls `ok()` until it holds; fails after `timeout` s naming `what`, with `detail()` when given."""
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        if ok():
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}" + (f":\n{detail()}" if detail else ""))


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


class Replica:
    """`tgi serve` in network namespace `ns`, at 10.200.N.2:3000 (a port nothing else in the namespace
    uses); HAProxy's server `rINDEX`."""

    def __init__(self, tgi, index, tag, subnet, log_dir, extra):
        self.ns = f"tgi{tag}r{index}"
        self.server = f"r{index}"
        self.host_if, self.ns_if = f"t{tag}h{index}", f"t{tag}n{index}"
        self.addr = f"10.200.{subnet}.2"
        self.base = f"http://{self.addr}:3000"
        self.log_path = os.path.join(log_dir, f"replica{index}.log")
        run(["ip", "netns", "add", self.ns])
        run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if])
        run(["ip", "link", "set", self.ns_if, "netns", self.ns])
        run(["ip", "addr", "add", f"10.200.{subnet}.1/24", "dev", self.host_if])
        run(["ip", "link", "set", self.host_if, "up"])
        for cmd in (["addr", "add", f"{self.addr}/24", "dev", self.ns_if], ["link", "set", self.ns_if, "up"],
                    ["link", "set", "lo", "up"]):
            run(["ip", "netns", "exec", self.ns, "ip", *cmd])
        args = [tgi, "serve", "--hostname", self.addr, "--port", "3000", *extra]
        self.log = open(self.log_path, "w")
        # `ip netns exec` execs the command: the child's pid is tgi's own.
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, *args], stdout=subprocess.DEVNULL,
                                     stderr=self.log)

    def healthy(self):
        return http(self.base + "/health", timeout=2)[0] == 200

    def wait_ready(self, timeout=300.0):
        """Waits for /health to answer 200 (the model loaded); fails with the log if tgi exits first."""
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.server} exited with status {self.proc.returncode}:\n"
                                   f"{log_tail(self.log_path)}")
            return self.healthy()
        wait_until(f"{self.base}/health to answer 200", ready, timeout, detail=lambda: log_tail(self.log_path))

    def signal(self, sig):
        self.proc.send_signal(sig)

    def remove(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()
        subprocess.run(["ip", "link", "del", self.host_if], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", self.ns], stderr=subprocess.DEVNULL)


class Cluster:
    """Three replicas and the router; a context manager that tears everything down."""

    def __init__(self, tgi, serve_args):
        self.tgi = tgi
        self.serve_args = serve_args
        self.dir = tempfile.mkdtemp(prefix="tgi-replicas-")
        self.replicas = []
        self.router = None

    def __enter__(self):
        tag = os.getpid() % 100000
        subnet0 = 3 * (os.getpid() % 80)
        try:
            for i in range(3):
                self.replicas.append(Replica(self.tgi, i + 1, tag, subnet0 + i + 1, self.dir, self.serve_args))
            for r in self.replicas:
                r.wait_ready()
            self.start_router()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def start_router(self):
        """Starts HAProxy on a chosen port, with a stats socket from a second configuration file, and
        waits until its checks have found every replica up."""
        port = unassigned_port()
        env = dict(os.environ, TGI_ROUTER_BIND=f"127.0.0.1:{port}")
        for i, r in enumerate(self.replicas):
            env[f"TGI_REPLICA_{i + 1}"] = f"{r.addr}:3000"
        self.stats = os.path.join(self.dir, "haproxy.sock")
        stats_cfg = os.path.join(self.dir, "stats.cfg")
        with open(stats_cfg, "w") as f:
            f.write(f"global\n    stats socket {self.stats} mode 600\n")
        log_path = os.path.join(self.dir, "haproxy.log")
        self.router_log = open(log_path, "w")
        # -dR (no SO_REUSEPORT): a port another process has taken fails HAProxy's bind instead of being shared.
        self.router = subprocess.Popen(["haproxy", "-db", "-dR", "-f", stats_cfg, "-f", HAPROXY_CFG], env=env,
                                       stdout=self.router_log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        seen = []

        def checked():
            if self.router.poll() is not None:
                raise RuntimeError(f"HAProxy exited with status {self.router.returncode} (if it cannot bind "
                                   f"127.0.0.1:{port}, another process took the port after it was chosen):\n"
                                   f"{log_tail(log_path)}")
            try:
                servers = self.servers()
            except OSError as e:
                seen[:] = [f"the stats socket does not answer: {e}"]
                return False
            states = [servers.get(r.server, {}) for r in self.replicas]
            seen[:] = [[(s.get("svname"), s.get("status"), s.get("check_status")) for s in states]]
            return all(s.get("status") == "UP" and s.get("check_status", "").endswith("L7OK") for s in states)
        wait_until("HAProxy's health checks to pass on every replica", checked,
                   detail=lambda: f"last seen {seen}\n{log_tail(log_path)}")
        wait_until(f"{self.url}/health through the router", lambda: http(self.url + "/health", timeout=2)[0] == 200)

    def servers(self):
        """HAProxy's `show stat` row of each replica in the backend that checks them, by server name."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(30)
            s.connect(self.stats)
            s.sendall(b"show stat\n")
            out = b"".join(iter(lambda: s.recv(65536), b"")).decode()
        rows = csv.DictReader(io.StringIO(out.removeprefix("# ")))
        return {r["svname"]: r for r in rows if r["pxname"] == "tgi_leastconn" and r["svname"] != "BACKEND"}

    def wait_down(self, replica):
        """Waits until HAProxy's checks have taken `replica` out of the rotation."""
        wait_until(f"HAProxy to mark {replica.server} down",
                   lambda: self.servers()[replica.server]["status"].startswith("DOWN"),
                   detail=lambda: f"its status is {self.servers()[replica.server]['status']}")

    def logs(self):
        """Every log, for a failure message."""
        out = []
        for name in sorted(n for n in os.listdir(self.dir) if n.endswith(".log")):
            out.append(f"--- {name}\n" + log_tail(os.path.join(self.dir, name)))
        return "\n".join(out)

    def bench(self, url, out, *extra):
        """Runs `tgi bench` against `url`, returns its JSON report's single run."""
        path = os.path.join(self.dir, out)
        cmd = [self.tgi, "bench", "--url", url, "--api", "tgi", "--tokenizer", os.path.join(ROOT, "models", "stories260k", "stories260k-f32.gguf"),
               "--quiet", "--force", "--json", path, *extra]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"tgi bench failed: {done.stdout}\n{done.stderr}")
        with open(path) as f:
            return json.load(f)["runs"][0]

    def __exit__(self, *exc):
        if self.router is not None:
            self.router.send_signal(signal.SIGTERM)
            try:
                self.router.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.router.kill()
            self.router_log.close()
        for r in self.replicas:
            r.remove()
        if exc[0] is None:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print(f"logs kept in {self.dir}", file=sys.stderr)
        return False
