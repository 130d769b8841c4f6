"""Three `tgi serve` replicas, each in its own network namespace (ip netns + a veth pair on private
10.200.x.y addresses), behind Debian's HAProxy running deploy/haproxy/haproxy.cfg unchanged.

Used by scale_out.py (the CI test) and measure.py (the figures in the README). Needs root, `ip`
and `haproxy`; everything it creates is removed on exit.
"""

import json
import os
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


def missing_prerequisites():
    """What this machine lacks to run the replicas (empty when nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (for ip netns)")
    for tool in ("ip", "haproxy"):
        if shutil.which(tool) is None:
            missing.append(tool)
    return missing


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def wait_until(what, ok, timeout=60.0):
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        if ok():
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out waiting for {what}")


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


class Replica:
    """`tgi serve` in network namespace `ns`, at 10.200.N.2:3000."""

    def __init__(self, tgi, index, tag, subnet, log_dir, extra):
        self.ns = f"tgi{tag}r{index}"
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
                wait_until(f"{r.base}/health", r.healthy)
            port = free_port()
            env = dict(os.environ, TGI_ROUTER_BIND=f"127.0.0.1:{port}")
            for i, r in enumerate(self.replicas):
                env[f"TGI_REPLICA_{i + 1}"] = f"{r.addr}:3000"
            self.router_log = open(os.path.join(self.dir, "haproxy.log"), "w")
            self.router = subprocess.Popen(["haproxy", "-db", "-f", HAPROXY_CFG], env=env,
                                           stdout=self.router_log, stderr=subprocess.STDOUT)
            self.url = f"http://127.0.0.1:{port}"
            wait_until("the router", lambda: http(self.url + "/health", timeout=2)[0] == 200)
            time.sleep(1.5)  # every server's checks have risen by then (rise 2, inter 500 ms)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def logs(self):
        """Every log, for a failure message."""
        out = []
        for name in sorted(os.listdir(self.dir)):
            with open(os.path.join(self.dir, name)) as f:
                out.append(f"--- {name}\n" + f.read()[-4000:])
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
