"""Plain HTTP GETs against the processes the tests start on loopback."""

from __future__ import annotations

import urllib.request


def get_text(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """(status, body); (0, "") while nothing answers at `url` yet."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except OSError:
        return 0, ""
