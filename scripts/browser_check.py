#!/usr/bin/env python3
"""Open the built course site in headless Chromium and check it as a reader would see it.

    python scripts/browser_check.py                 # build the site, serve it, check it
    python scripts/browser_check.py --site site     # check an already built site

The site is served on loopback by Python's http.server (in a thread) and driven through
Chromium's DevTools protocol over a small standard-library WebSocket client. For every page:
it loads (HTTP 200), nothing is logged as an error in the console (exceptions, failed
requests, console.error), and no include directive was left unexpanded. On every lesson page,
additionally: each Mermaid diagram rendered to an SVG, hints and the reference solution are
folded away. Screenshots of the home page and one lesson page go to site-artifacts/.

Exits 0 when every check passes, 1 when one fails (each failure is listed), 2 when the check
itself cannot run (no Chromium, the build failed). Chromium: scripts/install_chromium.sh.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--mute-audio", "--window-size=1280,900",
]
PAGE_TIMEOUT = 30.0      # seconds for one page to load and its diagrams to render
# file name -> (page, scrolled to its first diagram?)
SCREENSHOTS = {"home.png": ("", False), "lesson-03_fork.png": ("lessons/03_fork/", False),
               "lesson-03_fork-diagram.png": ("lessons/03_fork/", True)}


class CheckError(Exception):
    """The check itself cannot run (as opposed to a page that fails a check)."""


# --- a minimal WebSocket client (RFC 6455, client side, text frames) -------------------------


class WebSocket:
    def __init__(self, url: str, timeout: float = PAGE_TIMEOUT) -> None:
        parts = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise CheckError(f"DevTools closed the connection during the handshake: {response!r}")
            response += chunk
        head, self._buffer = response.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise CheckError(f"DevTools refused the WebSocket: {head.decode(errors='replace')}")

    def send(self, text: str) -> None:
        self._frame(0x1, text.encode())

    def _frame(self, opcode: int, data: bytes) -> None:
        header = bytearray([0x80 | opcode])
        if len(data) < 126:
            header.append(0x80 | len(data))
        elif len(data) < 1 << 16:
            header.append(0x80 | 126)
            header += struct.pack(">H", len(data))
        else:
            header.append(0x80 | 127)
            header += struct.pack(">Q", len(data))
        mask = os.urandom(4)
        masked = (int.from_bytes(data, "big") ^ int.from_bytes((mask * (len(data) // 4 + 1))[:len(data)], "big")
                  ).to_bytes(len(data), "big") if data else b""
        self.sock.sendall(bytes(header) + mask + masked)

    def _read(self, count: int) -> bytes:
        chunks, have = [self._buffer], len(self._buffer)
        while have < count:
            chunk = self.sock.recv(max(65536, count - have))
            if not chunk:
                raise CheckError("DevTools closed the connection")
            chunks.append(chunk)
            have += len(chunk)
        data = b"".join(chunks)
        self._buffer = data[count:]
        return data[:count]

    def recv(self, timeout: float) -> str:
        self.sock.settimeout(timeout)
        message = b""
        while True:
            first, second = self._read(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(length)
            if opcode == 0x8:
                raise CheckError("DevTools closed the WebSocket")
            if opcode == 0x9:
                self._frame(0xA, payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if first & 0x80:
                    return message.decode()

    def close(self) -> None:
        try:
            self._frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


# --- the DevTools protocol over it -----------------------------------------------------------------


class DevTools:
    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.last_id = 0
        self.events: list[dict] = []

    def call(self, method: str, timeout: float = PAGE_TIMEOUT, **params) -> dict:
        self.last_id += 1
        wanted = self.last_id
        self.ws.send(json.dumps({"id": wanted, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(max(0.1, deadline - time.monotonic())))
            if message.get("id") == wanted:
                if "error" in message:
                    raise CheckError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def pump(self, seconds: float) -> None:
        """Collect the events that arrive within `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.events.append(json.loads(self.ws.recv(left)))
            except (socket.timeout, TimeoutError):
                return

    def wait_for(self, method: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {method} within {timeout:.0f} s")
            try:
                self.events.append(json.loads(self.ws.recv(left)))
            except (socket.timeout, TimeoutError):
                pass

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise CheckError(f"evaluating {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")


# --- serving the site and starting the browser -------------------------------------------------------


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def find_chromium(explicit: str | None) -> str:
    for candidate in ([explicit] if explicit else ["chromium", "chromium-browser", "google-chrome"]):
        if candidate and (path := shutil.which(candidate)):
            return path
    raise CheckError("no Chromium found: run scripts/install_chromium.sh (Debian's chromium package)")


def start_chromium(binary: str, profile: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True)   # its own process group: stop_chromium ends its helpers too
    found: list[str] = []
    seen: list[str] = []

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line.rstrip())
            if match := re.search(r"DevTools listening on (ws://\S+)", line):
                found.append(match[1])

    threading.Thread(target=read_stderr, daemon=True).start()
    deadline = time.monotonic() + 30
    while not found:
        if process.poll() is not None or time.monotonic() > deadline:
            stop_chromium(process)
            raise CheckError("Chromium did not start its DevTools endpoint:\n  " + "\n  ".join(seen[-15:]))
        time.sleep(0.05)
    browser_url = urllib.parse.urlparse(found[0])
    with urllib.request.urlopen(f"http://{browser_url.netloc}/json/list", timeout=10) as response:
        targets = json.load(response)
    pages = [t for t in targets if t.get("type") == "page"]
    if not pages:
        stop_chromium(process)
        raise CheckError(f"Chromium has no page to drive: {targets}")
    return process, pages[0]["webSocketDebuggerUrl"]


def stop_chromium(process: subprocess.Popen) -> None:
    """End the Chromium this script started, with the helper processes of its group."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


# --- checking pages ------------------------------------------------------------------------------------

UNEXPANDED = re.compile(r"\{\{\s*[a-z_]+\(")


def svg_count_in_shadow_roots(node: dict) -> tuple[int, int]:
    """(div.mermaid elements, of which holding an <svg> in their shadow root), in a pierced DOM tree."""
    divs = rendered = 0
    stack = [node]
    while stack:
        current = stack.pop()
        attributes = current.get("attributes") or []
        classes = dict(zip(attributes[::2], attributes[1::2])).get("class", "").split()
        if current.get("nodeName") == "DIV" and "mermaid" in classes:
            divs += 1
            if any(_has_svg(root) for root in current.get("shadowRoots") or []):
                rendered += 1
        stack.extend(current.get("children") or [])
        stack.extend(current.get("shadowRoots") or [])
    return divs, rendered


def _has_svg(node: dict) -> bool:
    if node.get("nodeName", "").lower() == "svg":
        return True
    return any(_has_svg(child) for child in node.get("children") or [])


def problems_in_events(events: list[dict]) -> list[str]:
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            found.append(f"uncaught exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            words = " ".join(str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", []))
            found.append(f"console.{params['type']}: {words}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            found.append(f"{entry.get('source')} error: {entry.get('text')} {entry.get('url', '')}".strip())
        elif method == "Network.responseReceived" and params.get("type") == "Document":
            status = params.get("response", {}).get("status")
            if status != 200:
                found.append(f"HTTP {status} for {params['response'].get('url')}")
    return found


def check_page(tools: DevTools, url: str, is_lesson: bool) -> tuple[list[str], dict]:
    tools.events.clear()
    tools.call("Page.navigate", url=url)
    tools.wait_for("Page.loadEventFired", PAGE_TIMEOUT)
    problems: list[str] = []
    expected = tools.evaluate("document.querySelectorAll('pre.mermaid, div.mermaid').length") or 0
    deadline = time.monotonic() + PAGE_TIMEOUT
    divs = rendered = 0
    while True:
        tools.pump(0.2)
        waiting = tools.evaluate("document.querySelectorAll('pre.mermaid').length")
        if not waiting:
            tree = tools.call("DOM.getDocument", depth=-1, pierce=True)["root"]
            divs, rendered = svg_count_in_shadow_roots(tree)
            if rendered >= expected:
                break
        if any(event.get("method") == "Runtime.exceptionThrown" for event in tools.events):
            problems.append(f"Mermaid: {rendered} of {expected} diagrams rendered to SVG (the page threw an exception)")
            break
        if time.monotonic() > deadline:
            problems.append(f"Mermaid: {rendered} of {expected} diagrams rendered to SVG within {PAGE_TIMEOUT:.0f} s")
            break
    tools.pump(0.3)   # late console messages
    facts = tools.evaluate("""({
        title: document.title,
        h1: (document.querySelector('article h1') || {}).textContent || '',
        text: document.querySelector('article') ? document.querySelector('article').innerText : '',
        tips: document.querySelectorAll('article details.tip').length,
        openTips: document.querySelectorAll('article details.tip[open]').length,
        solutions: document.querySelectorAll('article details.success').length,
        code: document.querySelectorAll('article .highlight').length
    })""")
    problems.extend(problems_in_events(tools.events))
    if UNEXPANDED.search(facts["text"]) and "How this site is built" not in facts["text"]:
        problems.append("an include directive was left unexpanded in the page")
    if is_lesson:
        if expected == 0:
            problems.append("no Mermaid diagram on a lesson page")
        if facts["tips"] == 0 or facts["openTips"]:
            problems.append(f"hints should be folded away: {facts['tips']} hint blocks, {facts['openTips']} open")
        if facts["solutions"] != 1:
            problems.append(f"expected the reference solution folded away once, found {facts['solutions']}")
        if facts["code"] < 2:
            problems.append(f"expected starter and solution code, found {facts['code']} code blocks")
    return problems, {"diagrams": f"{rendered}/{expected}", "h1": facts["h1"].strip().rstrip("¶")}


def screenshot(tools: DevTools, url: str, target: Path, at_diagram: bool = False) -> None:
    tools.events.clear()
    tools.call("Page.navigate", url=url)
    tools.wait_for("Page.loadEventFired", PAGE_TIMEOUT)
    tools.pump(1.0)   # let diagrams and fonts settle
    if at_diagram:
        tools.evaluate("(document.querySelector('div.mermaid') || document.body)"
                       ".scrollIntoView({block: 'center'})")
        tools.pump(0.5)
    data = tools.call("Page.captureScreenshot", format="png")["data"]
    target.write_bytes(base64.b64decode(data))


# --- main --------------------------------------------------------------------------------------------------


def build_site(into: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(into)],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise CheckError(f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}")


def pages_of(site: Path) -> list[str]:
    pages = sorted(str(p.relative_to(site).parent).replace(os.sep, "/") for p in site.rglob("index.html")
                   if p.relative_to(site).parts[0] not in ("assets", "search"))
    return ["" if page == "." else page + "/" for page in pages]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, help="a built site to check (default: build one now)")
    parser.add_argument("--artifacts", type=Path, default=ROOT / "site-artifacts",
                        help="where screenshots go (default: site-artifacts/)")
    parser.add_argument("--chromium", help="the Chromium binary (default: chromium on the PATH)")
    args = parser.parse_args(argv)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sessionlab-site-", ignore_cleanup_errors=True) as temp:
        try:
            site = args.site.resolve() if args.site else Path(temp) / "site"
            if not args.site:
                build_site(site)
            if not (site / "index.html").is_file():
                raise CheckError(f"{site} holds no built site (no index.html)")
            binary = find_chromium(args.chromium)
        except CheckError as error:
            print(f"browser check: {error}", file=sys.stderr)
            return 2
        server, base = serve(site)
        process = None
        failures: dict[str, list[str]] = {}
        try:
            process, page_ws = start_chromium(binary, str(Path(temp) / "profile"))
            ws = WebSocket(page_ws)
            tools = DevTools(ws)
            for domain in ("Page", "Runtime", "Log", "Network", "DOM"):
                tools.call(f"{domain}.enable")
            tools.call("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                       deviceScaleFactor=1, mobile=False)
            pages = pages_of(site)
            lessons = [p for p in pages if re.fullmatch(r"lessons/\d\d_[a-z0-9_]+/", p)]
            if not lessons:
                failures["(site)"] = ["no lesson pages found under lessons/"]
            for page in pages:
                problems, facts = check_page(tools, base + page, page in lessons)
                mark = "FAIL" if problems else "ok  "
                print(f"{mark} /{page:<32} diagrams {facts['diagrams']:<5} {facts['h1'][:50]}")
                for problem in problems:
                    print(f"       - {problem}")
                if problems:
                    failures[page or "(home)"] = problems
            args.artifacts.mkdir(parents=True, exist_ok=True)
            for name, (page, at_diagram) in SCREENSHOTS.items():
                if page in pages:
                    screenshot(tools, base + page, args.artifacts / name, at_diagram)
                    print(f"screenshot: {args.artifacts / name}")
                else:
                    failures[page] = [f"page for screenshot {name} is missing"]
            ws.close()
        except (CheckError, TimeoutError, OSError) as error:
            print(f"browser check: {error}", file=sys.stderr)
            return 2
        finally:
            server.shutdown()
            if process is not None:
                stop_chromium(process)
    checked = len(pages)
    print(f"{checked} pages ({len(lessons)} lesson pages) in {time.monotonic() - started:.1f} s")
    print(f"browser: {checked - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
