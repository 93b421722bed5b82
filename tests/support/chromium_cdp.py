"""Headless Chromium for the page tests and the screenshots: install Debian's package if needed,
then load a page through the DevTools protocol over a pipe (no websocket library, no network).

Why CDP rather than `--dump-dom`: the test must see console errors and uncaught exceptions,
which only the protocol reports reliably.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def ensure_chromium() -> str:
    """The Chromium binary; installs Debian's `chromium` with apt only when it is missing.

    Raises RuntimeError (so the test fails, never skips) when it cannot be installed.
    """
    found = find_chromium()
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise RuntimeError("chromium is not installed and apt-get is not available")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    for cmd in (
        sudo + ["apt-get", *lock, "update"],
        sudo + ["apt-get", *lock, "install", "-y", "--no-install-recommends", "chromium"],
    ):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    found = find_chromium()
    if not found:
        raise RuntimeError("apt-get installed chromium but no chromium binary is on PATH")
    return found


FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
    "--window-size=1920,1080",  # wide enough that the runs table renders every chosen column
)


@dataclass(frozen=True)
class Call:
    """A request the page made: its body (POST), and its time from sending to the last byte."""

    url: str
    method: str
    body: str | None
    seconds: float | None  # None: not finished while the page loaded


@dataclass
class PageReport:
    """What the browser saw while loading a page."""

    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    evaluations: dict[str, object] = field(default_factory=dict)

    @property
    def errors(self) -> list[str]:
        return self.console_errors + self.exceptions + self.log_errors


def _above(fd: int, minimum: int) -> int:
    """A close-on-exec duplicate of `fd` numbered >= `minimum` (the original is closed)."""
    import fcntl

    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, minimum)
    os.close(fd)
    return new


class _Pipe:
    """A minimal CDP client over fds 3/4 (NUL-terminated JSON messages)."""

    def __init__(self, binary: str, user_data_dir: Path) -> None:
        to_child_r, self._to_child_w = os.pipe()
        self._from_child_r, from_child_w = os.pipe()
        # Move the child's ends above 4 so that dup2 onto 3 and 4 can never clobber them.
        to_child_r = _above(to_child_r, 10)
        from_child_w = _above(from_child_w, 10)

        def _child_fds() -> None:
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_child_fds,
            # close_fds would close 3 and 4 after preexec_fn; Python's own fds are non-inheritable
            # (PEP 446), so nothing else leaks into the browser.
            close_fds=False,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self._next_id += 1
        message: dict = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child_w, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _read_message(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no answer from chromium")
            ready, _, _ = select.select([self._from_child_r], [], [], remaining)
            if ready:
                chunk = os.read(self._from_child_r, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict:
        wanted = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.append(self._read_message(deadline))
        except TimeoutError:
            pass

    def close(self) -> None:
        try:
            self.send("Browser.close")
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait(timeout=10)
        finally:
            os.close(self._to_child_w)
            os.close(self._from_child_r)


def load_page(binary: str, url: str, user_data_dir: Path, expressions: dict[str, str],
              ready_expression: str, timeout: float = 60.0, screenshot: Path | None = None) -> PageReport:
    """Open `url`, wait until `ready_expression` is true, evaluate `expressions`, collect errors;
    with `screenshot`, save what the window shows there as PNG."""
    pipe = _Pipe(binary, user_data_dir)
    report = PageReport()
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime.enable", "Log.enable", "Page.enable", "Network.enable"):
            pipe.call(domain, session=session)
        pipe.call("Page.navigate", {"url": url}, session=session)
        deadline = time.monotonic() + timeout
        while True:
            value = pipe.call("Runtime.evaluate", {"expression": ready_expression, "returnByValue": True},
                              session=session)["result"].get("value")
            if value is True:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"page not ready after {timeout} s: {ready_expression}")
            pipe.drain(0.25)
        pipe.drain(0.5)  # late errors (e.g. from a resize or an animation frame)
        for name, expression in expressions.items():
            result = pipe.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                               session=session)
            report.evaluations[name] = result["result"].get("value")
        if screenshot is not None:
            import base64

            shot = pipe.call("Page.captureScreenshot", {"format": "png"}, session=session)
            Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
        for event in pipe.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                args = params.get("args", [])
                report.console_errors.append(" ".join(str(a.get("value", a.get("description"))) for a in args))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                report.exceptions.append(str(details.get("exception", {}).get("description", details.get("text"))))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                report.log_errors.append(str(params["entry"].get("text")))
            elif method == "Network.requestWillBeSent":
                report.requests.append(str(params.get("request", {}).get("url")))
        report.calls = _calls(pipe.events)
    finally:
        pipe.close()
    return report


def _calls(events: list[dict]) -> list[Call]:
    """The page's requests in the order sent, timed by the browser's own clock (CDP timestamps)."""
    sent: dict[str, dict] = {}
    finished: dict[str, float] = {}
    for event in events:
        params = event.get("params", {})
        if event.get("method") == "Network.requestWillBeSent":
            sent.setdefault(params["requestId"], params)
        elif event.get("method") == "Network.loadingFinished":
            finished[params["requestId"]] = params["timestamp"]
    return [Call(url=p["request"]["url"], method=p["request"]["method"], body=p["request"].get("postData"),
                 seconds=finished[rid] - p["timestamp"] if rid in finished else None)
            for rid, p in sent.items()]
