"""``pip install sbrules`` without extras: the offline commands, the AMQP client and the emulator's
plain AMQP run without the extras' packages (cryptography, pyjwt, jinja2, pyspark, azure-identity),
and a feature that needs one names the extra to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRAS_ONLY = ("cryptography", "jwt", "jinja2", "pyspark", "pyarrow", "azure.identity")

#: Runs sbrules with the extras' packages made unimportable, as in an install without them.
WITHOUT_EXTRAS = f"""
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if any(name == blocked or name.startswith(blocked + ".") for blocked in {EXTRAS_ONLY!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
from reconciler.cli import main
main(sys.argv[1:])
"""


def _sbrules(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_validate_and_the_demo_without_extras(tmp_path: Path) -> None:
    done = _sbrules("validate", str(REPO / "rules"), cwd=tmp_path)
    assert done.returncode == 0 and "valid:" in done.stdout + done.stderr, done.stderr
    done = _sbrules("demo", "--no-traffic", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "In sync" in done.stdout


def test_a_feature_that_needs_an_extra_names_it(tmp_path: Path) -> None:
    done = _sbrules("emulator", "--port", "0", "--entra-signing-key", "k" * 32, "--ca-file", str(tmp_path / "ca.pem"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "pip install 'sbrules[emulator]'" in done.stderr and "Traceback" not in done.stderr
