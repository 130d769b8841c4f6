#!/usr/bin/env python3
"""Hostile HTTP clients against a running `tgi serve` (Python standard library only).

Classes of requests (the quick ones first, then the slow flood), each counted by the status it got,
5xx, hangs (no answer and no close within --hang-after seconds) and error bodies that are not JSON:

  slow-body     N connections send a POST head and part of the body, then nothing (expect 408, or 503
                / a close beyond --max-connections)
  slow-head     N/4 connections send half a request head, then nothing (expect a close, no answer)
  content-type  POSTs with text/plain, form, multipart, no Content-Type (expect 415), and JSON ones
  head          HEAD on every GET route (expect 200 without a body)
  oversize      long URIs, a huge header, too many headers (expect 414 / 431 with a JSON body)
  host          no Host, two Hosts, an empty Host (expect 400), HTTP/1.0 without Host (200)

Meanwhile a prober GETs /health every 0.5 s. At the end it prints a table, the connections to the
server's port still established, and the server's open file descriptors (/proc/PID/fd; the process is
found by its listening socket unless --pid is given).

    target/release/tgi serve &
    python3 bench/hostile_http.py --port 3000 --slow 600
"""

import argparse
import json
import os
import socket
import threading
import time
from collections import Counter, defaultdict


def listening_pid(port):
    """The pid owning the socket that listens on `port` (Linux /proc), or None."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def established(port):
    """Server-side connections on `port` in ESTABLISHED or CLOSE_WAIT state (held by the server)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] in ("01", "08"):
                n += 1
    return n


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_class = defaultdict(Counter)

    def add(self, cls, key):
        with self.lock:
            self.by_class[cls][key] += 1


def exchange(host, port, data, hang_after, then=None):
    """Sends `data` (then optionally keeps the connection open without sending), reads until close or a
    complete response; returns (status or None, body bytes, outcome) with outcome one of 'answered',
    'closed' (closed without an answer), 'reset', 'hang', 'unreachable' (no connection within 10 s)."""
    try:
        s = socket.create_connection((host, port), timeout=10)
    except OSError:
        return None, b"", "unreachable"
    s.settimeout(hang_after)
    buf = b""
    try:
        if data:
            s.sendall(data)
        if then:
            then(s)
        while True:
            head_end = buf.find(b"\r\n\r\n")
            if head_end >= 0:
                head = buf[:head_end].decode("latin-1")
                status = int(head.split(" ", 2)[1])
                if status == 100:
                    buf = buf[head_end + 4 :]
                    continue
                length = None
                for line in head.split("\r\n")[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v.strip())
                body = buf[head_end + 4 :]
                if length is not None and len(body) >= length:
                    return status, body[:length], "answered"
            chunk = s.recv(65536)
            if not chunk:
                if buf.find(b"\r\n\r\n") >= 0:
                    head = buf[: buf.find(b"\r\n\r\n")].decode("latin-1")
                    return int(head.split(" ", 2)[1]), buf[buf.find(b"\r\n\r\n") + 4 :], "answered"
                return None, b"", "closed"
            buf += chunk
    except socket.timeout:
        return None, b"", "hang"
    except (ConnectionResetError, BrokenPipeError):
        return None, b"", "reset"
    finally:
        s.close()


def record(stats, cls, result, head_request=False):
    status, body, outcome = result
    if outcome != "answered":
        stats.add(cls, outcome)
        return
    stats.add(cls, status)
    if status >= 400 and not head_request:
        try:
            json.loads(body)
        except ValueError:
            stats.add(cls, "non-JSON error body")


def request(method, path, headers=(), body=b"", host="t", version="HTTP/1.1"):
    lines = [f"{method} {path} {version}"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += list(headers) + ["Connection: close"]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=3000)
    ap.add_argument("--pid", type=int, help="the server's pid (default: found by its listening socket)")
    ap.add_argument("--slow", type=int, default=600, help="slow-body connections (default 600)")
    ap.add_argument("--hang-after", type=float, default=45.0, help="seconds without answer or close = a hang")
    ap.add_argument("--rounds", type=int, default=20, help="rounds of the quick classes (default 20)")
    a = ap.parse_args()
    pid = a.pid or listening_pid(a.port)
    stats = Stats()
    fds_start = fds(pid) if pid else None

    health = Counter()
    peak = [fds_start or 0]
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            if pid:
                peak[0] = max(peak[0], fds(pid) or 0)
            r = exchange(a.host, a.port, request("GET", "/health"), 5.0)
            health["ok" if r[0] == 200 else f"failed ({r[0] or r[2]})"] += 1
            stop.wait(0.5)

    prober = threading.Thread(target=probe)
    prober.start()

    body = json.dumps({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 4}}).encode()
    chat = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}).encode()

    def slow_body(_):
        head = request("POST", "/generate", ["Content-Type: application/json"], b"")
        head = head.replace(b"Content-Length: 0", f"Content-Length: {len(body) + 100}".encode())
        record(stats, "slow-body", exchange(a.host, a.port, head + body[:10], a.hang_after))

    def slow_head(_):
        record(stats, "slow-head", exchange(a.host, a.port, b"POST /generate HTTP/1.1\r\nHost: t\r\nX-A: ", a.hang_after))

    quick = []
    for _ in range(a.rounds):
        for ct in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None]:
            h = [f"Content-Type: {ct}"] if ct else []
            quick.append(("content-type", request("POST", "/generate", h, body), False))
            quick.append(("content-type", request("POST", "/v1/chat/completions", h, chat), False))
        for ct in ["application/json", "application/json; charset=utf-8"]:
            quick.append(("content-type", request("POST", "/generate", [f"Content-Type: {ct}"], body), False))
        for path in ["/", "/health", "/ping", "/info", "/metrics", "/v1/models", "/api-doc/openapi.json"]:
            quick.append(("head", request("HEAD", path), True))
        quick.append(("oversize", request("GET", "/info?q=" + "a" * 9000), False))
        quick.append(("oversize", request("GET", "/v1/models?q=" + "a" * 70000), False))
        quick.append(("oversize", request("GET", "/info", ["X-Big: " + "b" * 70000]), False))
        quick.append(("oversize", request("GET", "/info", [f"X-H{i}: v" for i in range(200)]), False))
        quick.append(("host", request("GET", "/info", host=None), False))
        quick.append(("host", request("GET", "/info", ["Host: u"]), False))
        quick.append(("host", request("GET", "/v1/models", host=""), False))
        quick.append(("host", request("GET", "/health", host=None, version="HTTP/1.0"), False))
    for cls, data, is_head in quick:
        record(stats, cls, exchange(a.host, a.port, data, a.hang_after), head_request=is_head)

    workers = [threading.Thread(target=slow_body, args=(i,)) for i in range(a.slow)]
    workers += [threading.Thread(target=slow_head, args=(i,)) for i in range(a.slow // 4)]
    for w in workers:
        w.start()
        time.sleep(0.002)

    for w in workers:
        w.join()
    stop.set()
    prober.join()
    time.sleep(1.0)
    held = established(a.port)
    fds_end = fds(pid) if pid else None

    print(f"{'class':<14}{'requests':>9}{'5xx':>6}{'503 full':>9}{'hangs':>7}  outcomes")
    total = Counter()
    for cls in ["slow-body", "slow-head", "content-type", "head", "oversize", "host"]:
        c = stats.by_class[cls]
        n = sum(v for k, v in c.items() if k != "non-JSON error body")
        fivexx = sum(v for k, v in c.items() if isinstance(k, int) and k >= 500 and k != 503)
        full, hangs = c[503], c["hang"] + c["unreachable"]
        total.update({"requests": n, "5xx": fivexx, "503": full, "hangs": hangs})
        outcomes = ", ".join(f"{k}: {v}" for k, v in sorted(c.items(), key=lambda kv: str(kv[0])))
        print(f"{cls:<14}{n:>9}{fivexx:>6}{full:>9}{hangs:>7}  {outcomes}")
    print(f"{'total':<14}{total['requests']:>9}{total['5xx']:>6}{total['503']:>9}{total['hangs']:>7}")
    print("(5xx: server errors other than 503; 503 full: the connection bound's answer, by design)")
    print(f"connections held by the server at the end: {held}")
    print(f"server file descriptors: {fds_start} at the start, {peak[0]} at most, {fds_end} at the end (pid {pid})")
    ok = health["ok"]
    print(f"/health: {ok} of {sum(health.values())} probes answered 200"
          + ("" if ok == sum(health.values()) else f" ({dict(health)})"))


if __name__ == "__main__":
    main()
