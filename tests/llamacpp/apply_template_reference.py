"""llama-server's rendering of chat templates embedded in a GGUF (`POST /apply-template`), the reference of
tests/apply_template.rs. For each template, a copy of the bundled stories260k checkpoint carrying it is
converted by `tgi quantize`, served by llama-server, and each conversation's prompt recorded (or the HTTP
status it refused it with). Writes JSON {template: {case: {"prompt": ...} | {"status": ...}}} to stdout, with
"_recorded_on": the day (llama-server's local date) that templates calling strftime_now printed.

    python3 tests/llamacpp/apply_template_reference.py TGI LLAMA_SERVER > tests/llamacpp/apply-template.json
"""
import datetime
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "engines/tests/data/chat-templates"
CASES = json.loads((ROOT / "tests/llamacpp/apply-template-cases.json").read_text())


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return {"prompt": json.loads(r.read())["prompt"]}
    except urllib.error.HTTPError as e:
        return {"status": e.code}


def record(tgi, server, name, port):
    with tempfile.TemporaryDirectory() as tmp:
        hf = pathlib.Path(tmp) / "hf"
        shutil.copytree(ROOT / "models/stories260k/hf", hf)
        cfg_path = hf / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["chat_template"] = (TEMPLATES / f"{name}.jinja").read_text()
        cfg_path.write_text(json.dumps(cfg))
        config = json.loads((hf / "config.json").read_text())
        config["max_position_embeddings"] = 4096  # as the test has it, for the longest prompt
        (hf / "config.json").write_text(json.dumps(config))
        gguf = pathlib.Path(tmp) / "model.gguf"
        subprocess.run([tgi, "quantize", str(hf), "--type", "f32", "-o", str(gguf)], check=True, capture_output=True)
        proc = subprocess.Popen([server, "-m", str(gguf), "--jinja", "--port", str(port), "-c", "256"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                    break
                except Exception:
                    time.sleep(0.1)
            url = f"http://127.0.0.1:{port}/apply-template"
            return {case: post(url, body) for case, body in CASES["cases"].items()}
        finally:
            proc.terminate()
            proc.wait()


def main(tgi, server):
    out = {name: record(tgi, server, name, 18500 + i) for i, name in enumerate(CASES["templates"])}
    out["_recorded_on"] = datetime.date.today().isoformat()
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False, sort_keys=True)
    print()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
