"""How pytest-xdist shares the suite among its workers: one module per work unit, and the tests of one
``xdist_group`` (every Spark test; the CI integrations) on one worker whatever their module.

pytest-xdist's own ``--dist loadgroup`` renames each grouped test's node id in the worker, which
pytest 9 no longer lets a plugin do (node ids are structured), so its groups are silently ignored.
Here the workers write, when they collect, which test belongs to which group (a file each in a
folder the controller names in ``SBRULES_XDIST_GROUPS``); the controller's scheduler reads them
when it first needs a test's work unit, which is after every worker has collected.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

FOLDER_VARIABLE = "SBRULES_XDIST_GROUPS"


def name_the_folder() -> None:
    """In the controller, before the workers start: the folder they write their groups to."""
    os.environ[FOLDER_VARIABLE] = tempfile.mkdtemp(prefix="sbrules-xdist-")


def write_groups(worker: str, items: list[Any]) -> None:
    """In a worker, after collection: each grouped test's node id and its group."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder:
        return
    groups = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None:
            groups[item.nodeid] = str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    (Path(folder) / f"{worker}.json").write_text(json.dumps(groups))


class GroupScheduling(LoadScopeScheduling):
    """Work units: a test's group when it has one, else its module."""

    _groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            self._groups = {}
            for path in Path(os.environ[FOLDER_VARIABLE]).glob("*.json"):
                self._groups.update(json.loads(path.read_text()))
        group = self._groups.get(nodeid)
        return f"group:{group}" if group is not None else nodeid.split("::", 1)[0]
