"""Injected faults: server-busy answers, latency, dropped connections, refused CBS, faults files."""

from __future__ import annotations

import time

import pytest
from proton import ConnectionException
from proton.utils import LinkDetached

from reconciler.emulator import Faults, FaultsFileError
from reconciler.rest.client import ManagementRestClient

from .raw import RawManagement

ENUMERATE = "com.microsoft:enumerate-rules"
PAGE = {"top": 10, "skip": 0}


def test_faults_are_off_by_default(emulator):
    assert emulator.faults == Faults()
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        assert all(mgmt.request(ENUMERATE, PAGE)[0] == 200 for _ in range(20))


def test_busy_fraction_answers_503_server_busy_reproducibly(emulator):
    def run() -> list[int]:
        emulator.faults.update(busy_fraction=0.5, seed=11)
        with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
            return [mgmt.request(ENUMERATE, PAGE)[0] for _ in range(40)]

    first, second = run(), run()
    assert first == second
    assert set(first) == {200, 503} and 5 < first.count(503) < 35
    emulator.faults.update(busy_fraction=1.0)
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        status, props, _ = mgmt.request(ENUMERATE, PAGE)
    assert (status, props["errorCondition"]) == (503, "com.microsoft:server-busy")


def test_latency_delays_management_responses(emulator):
    emulator.faults.update(latency=0.3)
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        start = time.monotonic()
        assert mgmt.request(ENUMERATE, PAGE)[0] == 200
        assert time.monotonic() - start >= 0.3


def test_latency_delays_rest_responses_too(emulator):
    emulator.faults.update(latency=0.3)
    with ManagementRestClient(emulator.connection_string) as rest:
        start = time.monotonic()
        assert "orders" in rest.list_topics()
        assert time.monotonic() - start >= 0.3


def test_close_after_ops_drops_the_connection(emulator):
    emulator.faults.update(close_after_ops=3)
    with pytest.raises((ConnectionException, LinkDetached)):
        with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
            for _ in range(5):
                mgmt.request(ENUMERATE, PAGE)
    emulator.faults.clear()
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        assert mgmt.request(ENUMERATE, PAGE)[0] == 200


def test_refuse_cbs_answers_401_and_links_stay_closed(emulator):
    emulator.faults.update(refuse_cbs=True)
    with pytest.raises(LinkDetached):
        RawManagement(emulator, "orders/Subscriptions/all")


def test_faults_file_yaml_and_json(tmp_path):
    yaml_file = tmp_path / "faults.yaml"
    yaml_file.write_text("latency: 0.05\nbusy_fraction: 0.25\nclose_after_ops: 9\nrefuse_cbs: false\nseed: 3\n")
    faults = Faults.load(yaml_file)
    assert (faults.latency, faults.busy_fraction, faults.close_after_ops, faults.seed) == (0.05, 0.25, 9, 3)
    json_file = tmp_path / "faults.json"
    json_file.write_text('{"refuse_cbs": true}')
    assert Faults.load(json_file).refuse_cbs is True


@pytest.mark.parametrize(
    "text, where, message",
    [("latancy: 1", "1:1: latancy", "unknown faults: latancy"), ("seed: 1\nbusy_fraction: 2", "2:1: busy_fraction", "between 0 and 1"),
     ("- 1", "1:1", "map"), ("peek_limit: 0", "1:1: peek_limit", "peek_limit must be >= 1"),
     ("latency: [1\n", "2:1", "malformed YAML")],
)
def test_bad_faults_files_are_one_located_line(tmp_path, text, where, message):
    path = tmp_path / "faults.yaml"
    path.write_text(text)
    with pytest.raises(FaultsFileError, match=message) as info:
        Faults.load(path)
    assert str(info.value).startswith(f"{path}:{where}") and "\n" not in str(info.value)
