"""report.html in a real browser: compile an example, write its report, open it in headless Chromium, save a
full-page screenshot and fail on any console error.

Per target (default: MobileNetV2 from examples/mobilenet_v2.py on imxrt700, and on imxrt700-cpu, the same chip
without its NPU) this writes OUTPUT/<target>/ (model.pte, report.json, report.html, ...) and
OUTPUT/<target>/report.png, and prints the screenshot's path and the console errors.

How the browser is driven: Chromium runs with ``--remote-debugging-pipe`` and this script speaks the DevTools
protocol over the two pipes (file descriptors 3 and 4, JSON messages ending in NUL): no websocket client and
no other package is needed, and nothing listens on a port. Console errors are every ``console.error`` /
``console.assert`` call (``Runtime.consoleAPICalled``), every uncaught exception (``Runtime.exceptionThrown``)
and every error the browser logs itself, such as a failed load or a blocked resource (``Log.entryAdded``).
Before the reports, a page that calls ``console.error`` is loaded and must be caught: "no console errors"
is then a result, not a capture that saw nothing. The screenshot is ``Page.captureScreenshot`` of the whole
page at a 1280 px wide viewport.

Needs Chromium (Debian/Ubuntu: ``apt-get install -y chromium``; or set CHROMIUM=/path/to/chrome).
Exit status: 0 all reports clean, 1 a console error or a broken page, 2 no Chromium.

With ``--explorer`` (a Python with the explorer extra) each folder is also opened in Model Explorer through
``imxrt explore`` on 127.0.0.1, screenshot to OUTPUT/<target>/explorer.png, and the server is asked for the
estimated-time overlay it serves; the web app's request for Google's font is counted apart (offline here).

    python benchmarks/report.py [--output out/report_benchmark] [--targets imxrt700 imxrt700-cpu] [--model mobilenet_v2]
                                [--explorer]
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH, HEIGHT = 1280, 900
TIMEOUT = 60.0  # seconds for any one protocol reply

for _name in ("torchao", "torch.utils._pytree", "executorch"):
    logging.getLogger(_name).setLevel(logging.ERROR)
warnings.filterwarnings("ignore")


def find_chromium() -> str | None:
    if os.environ.get("CHROMIUM"):
        return shutil.which(os.environ["CHROMIUM"])
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe``; one page, its console errors collected."""

    def __init__(self, executable: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="imxrt-chromium-")
        self.log = open(Path(self.profile) / "stderr.log", "w+b")  # a file: a full pipe would stall Chromium
        commands_read, self.commands = os.pipe()
        self.replies, replies_write = os.pipe()

        def child_pipes() -> None:  # the protocol's fixed descriptors: 3 = commands in, 4 = replies out
            commands, replies = os.dup(commands_read), os.dup(replies_write)
            os.dup2(commands, 3)
            os.dup2(replies, 4)

        self.process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", f"--user-data-dir={self.profile}",
             f"--window-size={WIDTH},{HEIGHT}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
            preexec_fn=child_pipes, close_fds=False)
        os.close(commands_read)
        os.close(replies_write)
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}, session=True)

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self.replies], [], [], max(deadline - time.monotonic(), 0))
            chunk = os.read(self.replies, 1 << 20) if ready else b""
            if not chunk:
                self.log.seek(0)
                raise RuntimeError("Chromium did not answer (it exited or timed out): "
                                   f"{self.log.read()[-2000:].decode(errors='replace')}")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, event: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not any(e.get("method") == event for e in self.events):
            self.events.append(self._message(deadline))

    def open(self, url: str) -> list[str]:
        """Load ``url`` and return the console errors it caused."""
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_for("Page.loadEventFired")
        self.call("Runtime.evaluate", {"expression": "0"}, session=True)  # flush messages of the load
        return [text for text in map(console_error, self.events) if text]

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                         session=True)["result"].get("value")

    def screenshot(self, path: Path) -> int:
        """A PNG of the whole page; returns its height in CSS pixels."""
        height = int(self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]["height"])
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": WIDTH, "height": height,
                                                             "scale": 1}}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return height

    def close(self) -> None:
        try:
            os.write(self.commands, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        os.close(self.commands)
        os.close(self.replies)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def console_error(event: dict) -> str | None:
    """The text of a protocol event that is a console error, else None."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        return "console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
    if method == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        return "uncaught: " + str(details.get("exception", {}).get("description", details.get("text")))
    if method == "Log.entryAdded" and params["entry"].get("level") == "error":
        return f"{params['entry'].get('source')}: {params['entry'].get('text')} {params['entry'].get('url', '')}"
    return None


# What the page must show once rendered: the checks a person would make at a glance.
PAGE_FACTS = """JSON.stringify({
  title: document.title,
  sections: [...document.querySelectorAll('section h2')].map(h => h.textContent),
  rows: document.querySelectorAll('table.ops tbody tr').length,
  placement: document.querySelectorAll('#placement tbody tr').length,
  first: (document.querySelector('section') || {}).id,
  wide: [...document.querySelectorAll('.scroll')].filter(d => d.scrollWidth > d.clientWidth)
    .map(d => d.closest('section').id),
  tensors: document.querySelectorAll('rect.tensor').length,
  peak: document.querySelectorAll('.peak').length,
  overflow: document.documentElement.scrollWidth > window.innerWidth ||
    [...document.querySelectorAll('.scroll')].some(d => d.scrollWidth > d.clientWidth),
})"""


EXPLORER_PORT = 8091
EXPLORER_HOST_URL = f"127.0.0.1:{EXPLORER_PORT}"


def served_overlay(port: int, index: int) -> int:
    """How many ops the server's overlay ``index`` holds: what the web app loads from it."""
    import urllib.request

    address = f"http://127.0.0.1:{port}/api/v1/load_node_data?node_data_index={index}"
    with urllib.request.urlopen(address, timeout=10) as r:
        content = json.loads(json.loads(r.read())["content"])
    return sum(len(graph.get("results", {})) for graph in content.values())
EXPLORER_SETTLE_S = 15  # the web app loads the models and runs the adapters after the page's load event


def explorer_screenshot(browser: Browser, folder: Path) -> bool:
    """Start ``imxrt explore`` on ``folder`` (loopback only), open its address with the overlays, screenshot it
    to ``folder/explorer.png``; True when the server answered and the page showed no console error."""
    import subprocess
    import urllib.request

    from imxrt import explorer

    report = json.loads((folder / "report.json").read_text())
    server = subprocess.Popen([sys.executable, "-m", "imxrt.cli", "explore", str(folder), "--no-browser",
                               "--port", str(EXPLORER_PORT)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://{explorer.HOST}:{EXPLORER_PORT}/check_health", timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            print("  explorer: the server did not answer")
            return False
        errors = browser.open(explorer.url(explorer.config(folder, report), EXPLORER_PORT))
        time.sleep(EXPLORER_SETTLE_S)
        # every layer open, so the overlay's values show on the ops themselves
        browser.evaluate("document.querySelector('mat-icon.expand-all').parentElement.click()")
        time.sleep(EXPLORER_SETTLE_S / 3)
        errors += [text for text in map(console_error, browser.events) if text and text not in errors]
        # the web app asks Google's font server for its font, which a machine without internet cannot reach
        offline = [text for text in errors if "ERR_NAME_NOT_RESOLVED" in text and EXPLORER_HOST_URL not in text]
        errors = [text for text in errors if text not in offline]
        served = served_overlay(EXPLORER_PORT, index=1)  # explorer.overlays: the module's, then the times
        shown = browser.evaluate("document.body.innerText").count(explorer.ESTIMATE)
        browser.screenshot(folder / "explorer.png")
        print(f"  explorer: {folder / 'explorer.png'} (ETRecord graph; overlay '{explorer.ESTIMATE}' of {served} "
              f"ops served, named {shown} times on the page); console errors: {len(errors)}"
              + (f", {len(offline)} external resource(s) not reachable offline" if offline else ""))
        for text in errors:
            print(f"    {text}")
        return not errors and served > 0 and shown > 0
    finally:
        browser.open("about:blank")  # the web app's late requests are not the next page's errors
        server.terminate()
        server.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=HERE.parent / "out" / "report_benchmark")
    parser.add_argument("--targets", nargs="+", default=["imxrt700", "imxrt700-cpu"])
    parser.add_argument("--model", default="mobilenet_v2", help="an example of examples/")
    parser.add_argument("--explorer", action="store_true",
                        help="also open each folder in Model Explorer (imxrt explore, on 127.0.0.1) and screenshot "
                             "the graph with the estimated-time overlay: needs the explorer extra in this Python")
    args = parser.parse_args()

    chromium = find_chromium()
    if chromium is None:
        print("Chromium not found: install it (Debian/Ubuntu: apt-get install -y chromium) or set "
              "CHROMIUM=/path/to/chrome, then rerun", file=sys.stderr)
        return 2

    from imxrt.pipeline import CompileOptions, compile
    from imxrt.source import load_source

    source = load_source(str(EXAMPLES / f"{args.model}.py"))
    calibration = list(source.calibration) if source.calibration is not None else None
    browser = Browser(chromium)
    failed = False
    try:
        probe = browser.open("data:text/html," + quote("<script>console.error('probe')</script>"))
        if not any("probe" in text for text in probe):
            print("the console capture missed a console.error on a probe page: results below would mean nothing",
                  file=sys.stderr)
            return 1
        print(f"browser: {chromium} (console capture checked on a probe page)")
        for target in args.targets:
            start = time.perf_counter()
            result = compile(source.model, source.example_inputs, target, calibration,
                             CompileOptions(show_progress=False))
            folder = args.output / target
            result.save(folder)
            seconds = time.perf_counter() - start
            errors = browser.open((folder / "report.html").resolve().as_uri())
            facts = json.loads(browser.evaluate(PAGE_FACTS))
            height = browser.screenshot(folder / "report.png")
            buffers = sum(len(arena["buffers"]) for arena in result.report["memory"]["arenas"])
            problems = list(errors)
            rows = sum(not op.get("fused_into") for op in result.report["ops"])  # a fused op shares its op's row
            if facts["placement"] != rows:
                problems.append(f"placement table shows {facts['placement']} rows for {rows} ops")
            if result.report["advice"] and facts["first"] != "advice":
                problems.append(f"the first section is {facts['first']}, not the advice")
            if facts["tensors"] != buffers or facts["peak"] != len(result.report["memory"]["arenas"]):
                problems.append(f"timeline shows {facts['tensors']} bars and {facts['peak']} peak marks "
                                f"for {buffers} planned tensors")
            if facts["overflow"]:
                problems.append(f"the page or a table is wider than a {WIDTH} px window: {facts['wide']}")
            failed |= bool(problems)
            print(f"{args.model} on {target}: compiled and saved in {seconds:.1f} s; report.html "
                  f"{(folder / 'report.html').stat().st_size:,} bytes, {len(facts['sections'])} sections, "
                  f"{facts['rows']} table rows, {facts['tensors']} tensor bars, page {height} px tall")
            print(f"  screenshot: {folder / 'report.png'}")
            print(f"  console errors: {len(errors)}" + "".join(f"\n    {text}" for text in errors))
            for problem in problems[len(errors):]:
                print(f"  problem: {problem}")
            if args.explorer:
                failed |= not explorer_screenshot(browser, folder)
    finally:
        browser.close()
    print("FAIL: see the errors above" if failed else "OK: every report rendered without console errors")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
