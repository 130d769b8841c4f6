"""Scale-out for real on one machine (the CI test): three `tgi serve` replicas in their own network
namespaces behind HAProxy (deploy/haproxy/haproxy.cfg). Checks that requests sharing a prefix, or a
session header, land on one replica; that `tgi bench` through the router loses no request while a
replica is SIGTERMed (it drains: /health 503, then its requests finish); and that when another is
SIGKILLed only the requests in flight on it fail.

Usage: python3 tests/deploy/scale_out.py TGI_BINARY
Prints `skipped: REASON` and exits 0 when the machine lacks a prerequisite, unless CI=true, where that
is a failure; prints `scale-out ok` on success.
"""

import os
import signal
import sys
import threading
import time

from replicas import Cluster, http, metric, missing_prerequisites, wait_until

# Many times the second or so that HAProxy's checks (inter 500 ms, fall 2) need to take a draining replica out.
DRAIN_DELAY = 5
SERVE = ["--threads", "1", "--drain-delay", str(DRAIN_DELAY), "--shutdown-timeout", "20", "--max-batch-size", "16"]
CONCURRENCY = 8
PREFIX = ("Once upon a time, in a small village at the edge of a big green forest, there lived a little girl "
          "named Lily who loved to play outside with her dog and her friends every single day. ")


def deltas(cluster, name, action):
    """Each replica's change of metric `name` over `action()`."""
    before = [metric(r.base, name) for r in cluster.replicas]
    action()
    return [metric(r.base, name) - b for r, b in zip(cluster.replicas, before)]


def check_affinity(c):
    def shared_prefix():
        for i in range(6):
            body = {"inputs": PREFIX + f"Story number {i}:", "parameters": {"max_new_tokens": 4}}
            status, text = http(c.url + "/generate", body)
            assert status == 200, text
    hits = deltas(c, "tgi_prefix_cache_hits", shared_prefix)
    print(f"prefix-cache hits per replica over 6 shared-prefix requests: {hits}")
    assert sum(1 for h in hits if h > 0) == 1, f"the shared prefix was not served by exactly one replica: {hits}"

    def session():
        for i in range(4):
            body = {"inputs": f"Request {i} of a session", "parameters": {"max_new_tokens": 2}}
            status, text = http(c.url + "/generate", body, headers={"x-session-id": "user-42"})
            assert status == 200, text
    served = deltas(c, "tgi_request_success", session)
    print(f"requests per replica over 4 requests of one session: {served}")
    assert sorted(served) == [0, 0, 4], f"a session was split across replicas: {served}"


def check_request_ids(c):
    """The router gives a request without an id one; the replica logs it and returns it."""
    headers = {}
    status, text = http(c.url + "/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 2}},
                        response_headers=headers)
    assert status == 200, text
    rid = headers.get("x-request-id", "")
    assert len(rid) == 36 and rid.count("-") == 4, f"not the router's UUID: {headers}"
    wait_until(f"request id {rid} in a replica's log", lambda: any(rid in open(r.log_path).read() for r in c.replicas))
    print(f"request id {rid} from the router is in the replica's log and the response")


def bench_while(c, name, seconds, at, action):
    """`tgi bench` through the router for `seconds` at CONCURRENCY, running `action()` after `at` s; returns
    once both have finished."""
    timer = threading.Timer(at, action)
    timer.start()
    try:
        run = c.bench(c.url, f"{name}.json", "--concurrency", str(CONCURRENCY), "--duration", f"{seconds}s",
                      "--input-tokens", "24", "--output-tokens", "24", "--timeout", "30")
    finally:
        timer.cancel()
        timer.join()
    s = run["summary"]
    print(f"{name}: {s['requests_ok']} requests ok, errors {s['errors']}")
    return s


def main():
    tgi = sys.argv[1]
    missing = missing_prerequisites()
    if missing:
        reason = "missing " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            sys.exit(f"scale-out test cannot run under CI=true: {reason} (run .ci/run as root; it installs haproxy)")
        print(f"skipped: {reason}")
        return
    with Cluster(tgi, SERVE) as c:
        try:
            check_affinity(c)
            check_request_ids(c)
            drained = c.replicas[1]
            marked_down = []

            def drain():
                t = time.monotonic()
                drained.signal(signal.SIGTERM)
                c.wait_down(drained)
                marked_down.append(time.monotonic() - t)
            # The bench goes on for a few seconds after the drained replica stops accepting.
            s = bench_while(c, "sigterm", DRAIN_DELAY + 7, 3, drain)
            assert marked_down, "HAProxy did not take the draining replica out (the error is above)"
            print(f"HAProxy took the draining replica out {marked_down[0]:.1f} s after its SIGTERM")
            assert s["errors"] == {}, (f"requests failed while a replica drained (HAProxy took it out "
                                       f"{marked_down[0]:.1f} s into its {DRAIN_DELAY} s drain): {s['errors']}")
            assert s["requests_ok"] > 0
            assert drained.proc.wait(timeout=120) == 0, "the drained replica did not exit cleanly"

            killed = c.replicas[2]
            in_flight = []

            def kill():
                in_flight.append(metric(killed.base, "tgi_request_in_flight"))
                killed.signal(signal.SIGKILL)
            s = bench_while(c, "sigkill", 8, 3, kill)
            failed = sum(s["errors"].values())
            print(f"SIGKILL with {in_flight[0]:.0f} requests in flight on the replica at the scrape before it: "
                  f"{failed} failed")
            # Requests sent between the scrape and the kill are in flight on it too, however long that takes
            # on a loaded machine, but the bench never has more than CONCURRENCY in flight: any more failures
            # are requests sent after the kill, which the router should have retried on another replica.
            assert failed <= CONCURRENCY, (f"{failed} requests failed, more than the {CONCURRENCY} that can have "
                                           f"been in flight at the kill: {s['errors']}")
            assert set(s["errors"]) <= {"connection", "5xx", "protocol"}, s["errors"]
            assert s["requests_ok"] > 0
        except BaseException:
            print(c.logs(), file=sys.stderr)
            raise
    print("scale-out ok")


if __name__ == "__main__":
    main()
