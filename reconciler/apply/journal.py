"""The apply journal (``apply --journal``): what each request and each subscription came to."""

from __future__ import annotations

import datetime as _dt
import json
import threading
from typing import TextIO


class Journal:
    """JSON lines, one per request and per subscription outcome, flushed as written (crash-safe)."""

    def __init__(self, stream: TextIO | None):
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, **entry: object) -> None:
        if self._stream is None:
            return
        entry = {"time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")} | entry
        line = json.dumps(entry, ensure_ascii=False, default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()
