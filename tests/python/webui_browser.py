"""The web chat page at `/` in a real browser: Debian's chromium driven by Selenium through chromedriver.

Usage: webui_browser.py URL API_KEY CHROMIUM CHROMEDRIVER, against `tgi serve --api-key API_KEY` with a chat
template. The browser talks to the server through a small proxy of this script's, which holds the first chat
stream after a few events until the test has pressed Stop: so the test sees streamed tokens and stops a
generation that is still running, whatever the machine's speed. Checks, in order: `/info` shows; the first
message gets the API-key prompt (the server answers 401), and with the key, tokens stream; Stop stops; the
user's Markdown renders and its HTML stays text; Regenerate streams the whole answer, equal to the server's
own answer to the same request, with tokens/s shown; and no console errors beside the one expected 401.
Prints `webui ok`.
"""

import http.client
import http.server
import json
import re
import shutil
import sys
import tempfile
import threading
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

# Generous bounds for what the page waits on (the model, the browser): a slow machine waits longer, never fails.
WAIT = 120
# Server-sent events of the held stream passed before it is held: the role chunk, then content.
HOLD_AFTER = 4
MESSAGE = "Tell me a **story** about `<img src=x onerror=alert(1)>` and [this](javascript:alert(1))"
# Headers of one connection, not of the message.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


class Gate:
    """Holds the first chat stream through the proxy: `held` once it is held, `release` lets it go on."""

    def __init__(self):
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._left = 1

    def take(self):
        with self._lock:
            self._left -= 1
            return self._left >= 0


def proxy(upstream, gate):
    """A proxy to `upstream` (host, port) on a free loopback port, serving in its own thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            up = http.client.HTTPConnection(*upstream, timeout=WAIT * 3)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            up.request(self.command, self.path, body=body, headers=headers)
            r = up.getresponse()
            self.send_response(r.status, r.reason)
            for k, v in r.getheaders():
                if k.lower() not in HOP_BY_HOP:
                    self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            hold = self.path.endswith("/v1/chat/completions") and r.status == 200 and gate.take()
            events = 0
            try:
                while line := r.readline():
                    self.wfile.write(line)
                    if hold and line == b"\n":
                        events += 1
                        if events == HOLD_AFTER:
                            gate.held.set()
                            gate.release.wait(WAIT * 3)
            except (BrokenPipeError, ConnectionResetError):
                pass  # The browser stopped reading: Stop was pressed.
            finally:
                up.close()

        do_GET = do_POST = do_HEAD = forward

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def browser(chromium, chromedriver, profile):
    """Headless chromium with a fresh profile, its console kept for `get_log("browser")`."""
    o = webdriver.ChromeOptions()
    o.binary_location = chromium
    for flag in ("--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
                 "--disable-component-update --disable-sync --window-size=1200,900").split():
        o.add_argument(flag)
    o.add_argument(f"--user-data-dir={profile}")
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=o, service=Service(chromedriver))


def errors(drv):
    """The console's errors since the last call."""
    return [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]


def expected(url, key, request):
    """The server's own (non-streamed) answer to a chat request."""
    request = {k: v for k, v in request.items() if k != "stream_options"}
    body = json.dumps({**request, "stream": False}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=WAIT) as r:
        return json.load(r)


def main():
    url, key, chromium, chromedriver = sys.argv[1:5]
    upstream = urllib.parse.urlsplit(url)
    gate = Gate()
    front = proxy((upstream.hostname, upstream.port), gate)
    profile = tempfile.mkdtemp(prefix="tgi-webui-")
    drv = browser(chromium, chromedriver, profile)
    try:
        run(drv, f"http://127.0.0.1:{front.server_address[1]}", url, key, gate)
    finally:
        gate.release.set()
        drv.quit()
        front.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    print("webui ok")


def run(drv, page_url, url, key, gate):
    wait = WebDriverWait(drv, WAIT)
    by_id = lambda i: drv.find_element(By.ID, i)  # noqa: E731
    drv.get(page_url + "/")
    assert drv.title == "tgi chat", drv.title
    # The model's /info, in the header and the settings.
    wait.until(lambda d: "stories260k" in by_id("model").text)
    by_id("settings").find_element(By.TAG_NAME, "summary").click()
    info = by_id("info").text
    assert "max_total_tokens" in info and "kv_cache_budget" in info, info
    for field, value in (("temperature", "0"), ("max_tokens", "40")):
        by_id(field).clear()
        by_id(field).send_keys(value)

    # Without the key the server answers 401 and the page asks for it; the browser logs the 401.
    by_id("input").send_keys(MESSAGE + Keys.ENTER)
    wait.until(lambda d: by_id("key-prompt").is_displayed())
    seen = errors(drv)
    assert all(re.search(r"/v1/chat/completions - .* status of 401", e["message"]) for e in seen), seen
    assert not drv.find_elements(By.CSS_SELECTOR, ".msg.assistant"), "no answer without the key"
    by_id("key-input").send_keys(key + Keys.ENTER)

    # Tokens stream: the proxy holds the stream after its first events; the generation is still running.
    assert gate.held.wait(WAIT), "the chat stream never reached the proxy's hold"
    answer = lambda: drv.find_element(By.CSS_SELECTOR, ".msg.assistant")  # noqa: E731
    wait.until(lambda d: answer().find_element(By.CLASS_NAME, "body").text.strip())
    assert "streaming" in answer().get_attribute("class")
    assert by_id("stop").is_displayed() and not by_id("send").is_displayed()
    stats = by_id("stats").text
    assert re.fullmatch(r"\d+ tokens · [\d.]+ tokens/s · first token after \d+ ms …", stats), stats

    # Stop ends it: the partial answer stays, marked, and the page is ready for the next message.
    by_id("stop").click()
    wait.until(lambda d: "stopped" in answer().get_attribute("class"))
    assert answer().find_element(By.CLASS_NAME, "note").text == "stopped"
    assert by_id("send").is_displayed() and by_id("regenerate").is_displayed()
    gate.release.set()
    partial = drv.execute_script("return chat.messages.map(m => m.content)")
    assert len(partial) == 2 and partial[0] == MESSAGE and partial[1], partial

    # Markdown renders, and the HTML in the message stays text: no element comes of it.
    user = drv.find_element(By.CSS_SELECTOR, ".msg.user .body")
    assert user.find_element(By.TAG_NAME, "strong").text == "story"
    assert user.find_element(By.TAG_NAME, "code").text == "<img src=x onerror=alert(1)>"
    assert not drv.find_elements(By.CSS_SELECTOR, "#messages img, #messages a"), "no image, no javascript: link"
    assert user.text.endswith("and [this](javascript:alert(1))"), user.text

    # Regenerate streams the whole answer: the server's own, with its token count and a rate.
    by_id("regenerate").click()
    wait.until(lambda d: by_id("send").is_displayed())
    request = drv.execute_script("return request()")
    contents = drv.execute_script("return chat.messages.map(m => m.content)")
    want = expected(url, key, {**request, "messages": request["messages"][:1]})
    text = want["choices"][0]["message"]["content"]
    assert contents == [MESSAGE, text], (contents, text)
    assert text.startswith(partial[1]), (partial[1], text)
    stats = by_id("stats").text
    tokens = want["usage"]["completion_tokens"]
    assert re.fullmatch(rf"{tokens} tokens · [\d.]+ tokens/s · first token after \d+ ms", stats), stats
    assert not by_id("error").is_displayed(), by_id("error").text
    seen = errors(drv)
    assert not seen, f"console errors: {seen}"


if __name__ == "__main__":
    main()
