"""Shared test fixtures. Area-specific fixtures live in each tests/<area>/conftest.py."""

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings

# Compiled test modules (assertions rewritten) and package modules are cached in __pycache__ even
# where the environment turns bytecode off: recompiling them costs most of the collection time and
# two seconds in each `sbrules` subprocess a test starts.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from reconciler.cli import main  # noqa: E402
from tests import processes  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# No per-example deadline: it is a timed assertion, and it fails on a loaded machine, not on a bug.
settings.register_profile("sbrules", deadline=None)
settings.load_profile("sbrules")


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"pytest got signal {signum}")


def pytest_configure(config):
    """SIGTERM stops the run as Ctrl-C does, so fixtures still end the processes they started; the
    controller of a distributed run names the folder its workers write their test groups to."""
    signal.signal(signal.SIGTERM, _interrupted)
    if not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("xdist"):
        from tests.xdist_groups import name_the_folder

        name_the_folder()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hooks: absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    from tests.xdist_groups import GroupScheduling

    return GroupScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """Workers for ``-n auto``. The quick loop is pure computation: one per core. The whole suite
    mostly waits (emulators on loopback, child processes, JVM start-ups), so it overlaps more."""
    return 2 if config.option.markexpr.strip() == "unit" else 4


def pytest_unconfigure(config):
    processes.end_all()


@pytest.hookimpl(tryfirst=True)  # before -m selects on the markers added here
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.slow)  # a JVM, and Spark jobs: never the quick loop
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))  # one worker, one SparkSession in process
        if item.get_closest_marker("unit") and item.get_closest_marker("slow"):
            raise pytest.UsageError(f"{item.nodeid} is marked both unit and slow: the quick loop takes no slow test")
    if hasattr(config, "workerinput"):
        from tests.xdist_groups import write_groups

        write_groups(config.workerinput["workerid"], items)


#: A ``unit`` test that takes longer than this (seconds, its call alone) belongs in ``slow``.
UNIT_BUDGET = 1.0
_slow_units: list[tuple[str, float]] = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > UNIT_BUDGET and "unit" in report.keywords:
        _slow_units.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter):
    """The quick loop's guard: name every ``unit`` test over its budget (the loop must stay under 30 s)."""
    if _slow_units:
        terminalreporter.section(f"unit tests over {UNIT_BUDGET:g} s: mark them slow", yellow=True)
        for nodeid, seconds in sorted(_slow_units, key=lambda pair: -pair[1]):
            terminalreporter.line(f"{seconds:5.2f} s  {nodeid}")


@pytest.fixture(autouse=True)
def unit_tests_stay_in_process(request, monkeypatch):
    """A ``unit`` test opens no socket and starts no process (so no emulator and no JVM either)."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(*args, **kwargs):
        raise AssertionError("a unit test may not open sockets or start processes: mark it otherwise")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "bind", refuse)
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture(scope="session", autouse=True)
def trust_only_test_certificates(tmp_path_factory):
    """The tests' TLS trust store is one throwaway CA, not this machine's bundle.

    No test may pass because of a certificate the machine happens to trust (the TLS tests pass
    their own CA). It is also the suite's largest fixed cost otherwise: every proton Container (each
    emulator, client and test server) builds two TLS contexts, and each loads the default CA bundle,
    0.1-0.4 s apiece with OpenSSL 3.
    """
    folder = tmp_path_factory.mktemp("trust")
    anchor = folder / "ca.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", "/CN=sbrules tests trust anchor", "-keyout", os.devnull, "-out", str(anchor)],
        check=True, capture_output=True,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SSL_CERT_FILE", str(anchor))
        patch.setenv("SSL_CERT_DIR", str(folder))
        yield


@pytest.fixture
def run_cli(capsys):
    """run_cli(*args) -> (exit code, stdout, stderr) of `sbrules` run in this process."""

    def _run(*args: str) -> tuple[int, str, str]:
        root = logging.getLogger()
        level, handlers = root.level, list(root.handlers)
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:  # `-v` configures the process's logging: an emulator thread of a later test must not log to it
            root.setLevel(level)
            root.handlers[:] = handlers
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


def one_error(code: int, out: str, err: str, expected_code: int, cause: str) -> str:
    """Assert the command failed as a user should see it: ``expected_code``, no traceback anywhere,
    exactly one ``error:`` line, and that line matches ``cause`` (a regex naming the cause)."""
    assert code == expected_code, (code, out, err)
    assert "Traceback" not in out + err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert re.search(cause, errors[0]), errors[0]
    return errors[0]


@pytest.fixture
def check() -> SimpleNamespace:
    """``check.one_error(code, out, err, expected_code, cause_regex)``: how a failure's one line is checked."""
    return SimpleNamespace(one_error=one_error)


class ManualClock:
    """Unix time that stands still until the test moves it (it starts at the real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> ManualClock:
    """A clock to inject where the code reads the time (``Emulator(token_clock=clock)``)."""
    return ManualClock()


SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


@pytest.fixture(scope="session")
def output_schema():
    """output_schema("validate") -> a validator for schemas/validate.schema.json that resolves the
    other schemas it refers to (by their $id), so real outputs are checked against the shipped files."""
    import json

    import jsonschema
    from referencing import Registry, Resource

    docs = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in SCHEMAS.glob("*.schema.json")}
    registry = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs.values())

    def validator(name: str) -> jsonschema.protocols.Validator:
        schema = docs[f"{name}.schema.json"]
        cls = jsonschema.validators.validator_for(schema)
        return cls(schema, registry=registry, format_checker=cls.FORMAT_CHECKER)

    return validator


class DevelopmentEntraCredential:
    """A credential as azure-identity's are to sbrules (``get_token(*scopes)`` → ``.token``,
    ``.expires_on``), issuing what Entra ID would for the Service Bus scope, signed HS256 with an
    emulator's development key instead of Entra ID's own."""

    def __init__(self, key: str, lifetime: int = 3600, clock=time.time) -> None:
        self._key = key
        self._lifetime = lifetime
        self._clock = clock
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **_options: object):
        import jwt
        from azure.core.credentials import AccessToken

        self.scopes.append(scopes)
        (scope,) = scopes
        issued = int(self._clock())
        claims = {
            "aud": scope.removesuffix("/.default"),
            "iss": "https://sts.windows.net/00000000-0000-0000-0000-000000000000/",
            "oid": "11111111-1111-1111-1111-111111111111",
            "iat": issued,
            "exp": issued + self._lifetime,
        }
        return AccessToken(jwt.encode(claims, self._key, algorithm="HS256"), issued + self._lifetime)


@pytest.fixture
def entra_credential(monkeypatch):
    """entra_credential(key) -> the credential ``--auth entra`` then uses in this process."""

    def _install(key: str, **options: object) -> DevelopmentEntraCredential:
        from reconciler.namespace import credentials as sas

        credential = DevelopmentEntraCredential(key, **options)
        monkeypatch.setattr(sas, "default_credential", lambda: credential)
        return credential

    return _install


@pytest.fixture
def serve():
    """serve(handle) -> port: a TCP listener on loopback that runs handle(socket) per connection."""
    listeners = []

    def start(handle) -> int:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listeners.append(listener)

        def loop() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

        threading.Thread(target=loop, daemon=True).start()
        return listener.getsockname()[1]

    yield start
    for listener in listeners:
        listener.close()


class ConnectProxy:
    """A real HTTP CONNECT proxy (proxy.py from PyPI) in a child process, on loopback, with basic auth.

    ``url`` has the credentials; ``tunnels()`` reads the proxy's access log: the ``host:port`` of
    every CONNECT it carried (it logs one when the tunnel closes)."""

    USER, PASSWORD = "ci", "proxy-" + os.urandom(6).hex()

    def __init__(self, directory: Path) -> None:
        port_file, self.log = directory / "proxy.port", directory / "proxy.log"
        self._process = processes.spawn(
            [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0", "--port-file", str(port_file),
             "--num-acceptors", "1", "--num-workers", "1", "--threaded", "--log-file", str(self.log),
             "--basic-auth", f"{self.USER}:{self.PASSWORD}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self._process.poll() is None and time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.05)
        self.port = int(port_file.read_text().split()[0])
        self.url = f"http://{self.USER}:{self.PASSWORD}@127.0.0.1:{self.port}"
        self.anonymous_url = f"http://127.0.0.1:{self.port}"

    def tunnels(self) -> list[str]:
        return re.findall(r"CONNECT (\S+:\d+) - \d+ bytes", self.log.read_text() if self.log.exists() else "")

    def wait_for_tunnel(self, target: str, count: int = 1, timeout: float = 10.0) -> list[str]:
        """The tunnels, once at least ``count`` to ``target`` are logged (the log line comes as one closes)."""
        deadline = time.monotonic() + timeout
        while self.tunnels().count(target) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.tunnels()

    def stop(self) -> None:
        processes.end(self._process, timeout=10)


@pytest.fixture(scope="session")
def connect_proxy(tmp_path_factory):
    proxy = ConnectProxy(tmp_path_factory.mktemp("proxy"))
    yield proxy
    proxy.stop()
