"""The one way sbrules writes a JSON document, on stdout or to a file (plans, reports, exports,
Config.json): keys in the document's own order, non-ASCII characters as they are (UTF-8), a
two-space indent, and one newline at the end."""

from __future__ import annotations

import json
from typing import Any


def json_text(doc: Any) -> str:
    """``doc`` as sbrules writes every JSON document."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
