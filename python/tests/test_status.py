"""status() and `python -m hindsight_collect` against a stand-in Connect server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from hindsight_collect import StatusError, status
from hindsight_collect.__main__ import main

SEEN: list[tuple[str, str, bytes]] = []


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        SEEN.append((self.path, self.headers["Content-Type"], body))
        if self.path == "/hindsight.v1.StatusService/GetStatus":
            out = json.dumps({"status": {"version": "v0", "state": "STATE_READY", "spool": {"done": "3"}}}).encode()
            self.send_response(200)
        else:
            out = json.dumps({"code": "unimplemented", "message": "no such method"}).encode()
            self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    srv = HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_status(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # must not be used
    SEEN.clear()
    st = status(server)
    assert st == {"version": "v0", "state": "STATE_READY", "spool": {"done": "3"}}
    assert SEEN == [("/hindsight.v1.StatusService/GetStatus", "application/json", b"{}")]
    assert status("http://" + server + "/")["spool"]["done"] == "3"


def test_status_errors(server: str) -> None:
    with pytest.raises(StatusError, match=r"HTTP 404: unimplemented: no such method"):
        status(f"http://{server}/prefix")
    with pytest.raises(StatusError, match=f"get status from 127.0.0.1:{free_port()}|refused"):
        status(f"127.0.0.1:{free_port()}", timeout=2)


def test_cli(server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["status", "--addr", server]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "STATE_READY"
    assert main(["status", "--addr", f"127.0.0.1:{free_port()}", "--timeout", "2"]) == 1
    assert "hindsight_collect status: get status from" in capsys.readouterr().err
    tok = tmp_path / "tokenizer.json"
    tok.write_bytes(b'{"model": {}}')
    assert main(["fingerprint", str(tok)]) == 0
    assert capsys.readouterr().out.strip() == (
        "sha256:" + __import__("hashlib").sha256(b'{"model": {}}').hexdigest())
    res = subprocess.run([sys.executable, "-m", "hindsight_collect", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "status" in res.stdout
