"""Whether the Hugging Face Hub can be reached: the offline switch and a connection probe (no hub client import, so
that low floors such as the language identifier's loader can ask before a download's retries)."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (``1``, ``true``, ``yes``): nothing is fetched from or pushed to the Hub."""
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hub's endpoint (``HF_ENDPOINT``, else huggingface.co) accepts a connection within ``timeout`` s."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = urlparse(endpoint).hostname or "huggingface.co"
    port = urlparse(endpoint).port or 443
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
