"""The Kubernetes manifests (the CI test): every resource under deploy/kubernetes validated against
the Kubernetes JSON schemas of `kubernetes-validate` (offline, --strict: unknown fields fail), the
ServiceMonitor (a Prometheus Operator CRD the package has no schema for) checked field by field,
and the manifests checked against tgi itself: the Deployment's flags start a real `tgi serve`, the
HPA's metrics are in its /metrics, the probes hit /health on the named port, selectors match the
pod labels, and terminationGracePeriodSeconds covers --drain-delay plus --shutdown-timeout.

Usage: python3 tests/deploy/manifests.py TGI_BINARY
Prints `skipped: REASON` (exit 0) without kubernetes-validate, unless CI=true; `manifests ok` on success.
"""

import copy
import glob
import os
import subprocess
import sys
import tempfile

from replicas import ROOT, http, listening_port

KUBERNETES = "1.34"


def load():
    import yaml
    docs = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy", "kubernetes", "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                docs[doc["kind"]] = doc
    return docs


def flag(args, name):
    value = next(a.split("=", 1)[1] for a in args if a.startswith(f"--{name}="))
    return float(value)


def check_schemas(docs):
    import kubernetes_validate
    for kind, doc in docs.items():
        if kind in ("Kustomization", "ServiceMonitor"):
            continue
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        print(f"{kind}: valid against the Kubernetes {KUBERNETES} schema")
    broken = copy.deepcopy(docs["Deployment"])
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {"path": "/health"}
    try:
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError:
        pass
    else:
        raise AssertionError("strict validation accepted a misspelled field: the check checks nothing")


def check_service_monitor(sm, labels):
    assert sm["apiVersion"] == "monitoring.coreos.com/v1", sm["apiVersion"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= labels.items(), "the ServiceMonitor selects no Service"
    (endpoint,) = sm["spec"]["endpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}, endpoint
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics"), endpoint


def check_consistency(docs):
    dep = docs["Deployment"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for kind in ("Service", "PodDisruptionBudget"):
        sel = docs[kind]["spec"]["selector"]
        assert sel.get("matchLabels", sel).items() <= labels.items(), f"the {kind} selects no pod"
    check_service_monitor(docs["ServiceMonitor"], docs["Service"]["metadata"]["labels"])
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] in ports
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = c[probe]["httpGet"]
        assert (get["path"], get["port"] in ports) == ("/health", True), (probe, get)
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    drain, shutdown = flag(c["args"], "drain-delay"), flag(c["args"], "shutdown-timeout")
    assert grace >= drain + shutdown, f"terminationGracePeriodSeconds {grace} < {drain} + {shutdown}"
    print(f"terminationGracePeriodSeconds {grace} = --drain-delay {drain} + --shutdown-timeout {shutdown} + margin")
    hpa = docs["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    return c, [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]]


def check_against_tgi(tgi, container, metrics):
    """The Deployment's flags (but the model, which is not here) start tgi serve; the HPA's metrics exist."""
    args = [a for a in container["args"] if not a.startswith("--model=")]
    env = dict(os.environ, **{e["name"]: e["value"] for e in container.get("env", [])})
    log = tempfile.NamedTemporaryFile("w", prefix="tgi-manifests-", suffix=".log")
    proc = subprocess.Popen([tgi, "serve", "--port", "0", *args], env=env, stderr=log)
    try:
        base = f"http://127.0.0.1:{listening_port(proc, log.name, 'tgi serve with the Deployment flags')}"
        status, text = http(base + "/metrics")
        assert status == 200, f"/metrics answered {status}: {text}"
        names = {line.split(" ")[0].split("{")[0] for line in text.splitlines() if not line.startswith("#")}
        for m in metrics:
            assert m in names, f"the HPA scales on {m}, which /metrics does not have"
        print(f"tgi serve accepts {' '.join(args)}; /metrics has {', '.join(metrics)}")
    finally:
        proc.terminate()
        proc.wait(timeout=120)
        log.close()


def main():
    tgi = sys.argv[1]
    try:
        import kubernetes_validate  # noqa: F401
        import yaml  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI") == "true":
            sys.exit(f"the manifest test cannot run under CI=true: {e} (pip install -r tests/python/requirements.txt)")
        print(f"skipped: {e}")
        return
    docs = load()
    check_schemas(docs)
    container, metrics = check_consistency(docs)
    check_against_tgi(tgi, container, metrics)
    print("manifests ok")


if __name__ == "__main__":
    main()
