"""A client for the daemon's status service over the Connect protocol with JSON
(hindsight.v1.StatusService/GetStatus), using only the standard library."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

DEFAULT_ADDR = "127.0.0.1:7077"
"""DEFAULT_ADDR is hindsightd's default status address (config key `listen`)."""


class StatusError(RuntimeError):
    """StatusError is raised when the daemon cannot be reached or answers with an error."""


def status(addr: str = DEFAULT_ADDR, *, timeout: float = 5.0) -> dict[str, Any]:
    """status returns the daemon's status (the `status` field of GetStatusResponse) as
    protojson writes it: lowerCamelCase keys, int64 counts as strings, enums by name,
    zero values left out. For example status()["spool"].get("done", "0").

    addr is HOST:PORT or an http:// URL. Proxy settings from the environment are not
    used: the status port is local."""
    base = addr if addr.startswith(("http://", "https://")) else "http://" + addr
    req = urllib.request.Request(base.rstrip("/") + "/hindsight.v1.StatusService/GetStatus", data=b"{}",
                                 headers={"Content-Type": "application/json"}, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")
        try:
            err = json.loads(detail)
            detail = f"{err.get('code', e.code)}: {err.get('message', '')}"
        except ValueError:
            pass
        raise StatusError(f"get status from {addr}: HTTP {e.code}: {detail}") from e
    except (urllib.error.URLError, OSError) as e:
        raise StatusError(f"get status from {addr}: {getattr(e, 'reason', e)}") from e
    except ValueError as e:
        raise StatusError(f"get status from {addr}: response is not JSON: {e}") from e
    if not isinstance(body, dict):
        raise StatusError(f"get status from {addr}: response is not a JSON object")
    st = body.get("status", {})
    if not isinstance(st, dict):
        raise StatusError(f"get status from {addr}: status is not a JSON object")
    return st
