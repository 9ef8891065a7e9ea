"""No client bytes stop the emulator: the kept corpus replayed, malformed input answered with its AMQP
error, and a bounded run of the coverage-guided fuzzer (``fuzz_emulator.py``).

``corpus/*.bin`` holds every input that ever broke the emulator (named for what it does) and a few
seeds; it is replayed over a socket against a running emulator and in process with the fuzzer's
full check (``inprocess.check``). ``corpus/coverage/`` is the fuzzer's own corpus, minimized: the
inputs that reach the server's branches, replayed in process and the start of every fuzzing run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from proton import uint

from . import frames, inprocess

CORPUS = Path(__file__).parent / "corpus"
KEPT = sorted(CORPUS.glob("*.bin"))
COVERAGE = sorted((CORPUS / "coverage").glob("*"))
ROOT = Path(__file__).parents[2]


def _still_serving(emulator) -> None:
    from .raw import RawManagement

    assert emulator.running
    assert emulator.handler.errors == 0
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        assert mgmt.request("com.microsoft:enumerate-rules", {"top": 10, "skip": 0})[0] == 200


@pytest.mark.parametrize("path", KEPT, ids=lambda p: p.stem)
def test_corpus_input_leaves_the_emulator_serving(emulator, path):
    frames.send(emulator.port, path.read_bytes())
    _still_serving(emulator)


@pytest.mark.unit
@pytest.mark.parametrize("path", KEPT + COVERAGE, ids=lambda p: p.name)
def test_corpus_input_in_process_leaves_nothing_behind(path):
    inprocess.check(inprocess.emulator(), path.read_bytes())


def test_the_corpus_has_every_crash_found():
    for name in [
        "duplicate-attach-link-name-not-utf8",
        "fuzz-2781168411-attach-link-name-not-utf8",
        "fuzz-begin-before-open-link-kept",
    ]:
        assert (CORPUS / f"{name}.bin").exists()


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(frames.seeds()))
def test_seed_sessions_are_served_without_an_error(name):
    """The fuzzer's seeds are valid sessions, so its mutations start deep in the server."""
    emu = inprocess.emulator()
    answer = inprocess.serve(emu, frames.seeds()[name])
    assert frames.errors(answer) == []
    assert re.findall(rb"status-?[cC]ode", answer), "no request was answered"
    inprocess.check(emu, frames.seeds()[name])


def _with_token(*data: bytes, entity: str = "orders") -> bytes:
    return frames.start() + frames.put_token(entity) + b"".join(data)


MALFORMED = {
    # the emulator's own checks
    "address not UTF-8": ((CORPUS / "attach-address-not-utf8.bin").read_bytes(), ("close", "amqp:decode-error")),
    "attach without a token": (frames.start() + frames.attach("p", 0, True, "p", "orders"), ("detach", "amqp:unauthorized-access")),
    "attach to no entity": (_with_token(frames.attach("p", 2, True, "p", "nowhere"), entity="nowhere"), ("detach", "amqp:not-found")),
    "publish to a subscription": (
        _with_token(frames.attach("p", 2, True, "p", "orders/Subscriptions/all")), ("detach", "amqp:not-allowed"),
    ),
    "request not AMQP-encoded": (_with_token(frames.transfer(0, 1, b"\x00Sw\xb1\xff\xff")), ("disposition", "amqp:decode-error")),
    # proton's engine, which the emulator leaves them to
    "frame larger than agreed": (frames.start() + b"\xff\xff\xff\xff\x02\x00\x00\x00", ("close", "amqp:connection:framing-error")),
    "transfer on a handle never attached": (frames.start() + frames.transfer(7, 0, b""), ("close", "amqp:invalid-field")),
    "detach of a handle never attached": (frames.start() + frames.encoded(frames.DETACH, [uint(5), True]), ("close", "amqp:invalid-field")),
    "end of a channel never begun": (frames.start() + frames.encoded(frames.END, [], channel=9), ("close", "amqp:not-allowed")),
}


@pytest.mark.unit
@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_input_is_answered_with_its_amqp_error(name):
    data, expected = MALFORMED[name]
    emu = inprocess.emulator()
    assert frames.errors(inprocess.serve(emu, data))[0] == expected
    assert emu.handler.errors == 0


def test_an_address_that_is_not_utf8_closes_the_connection_with_decode_error(emulator):
    answer = frames.answer_to(emulator.port, (CORPUS / "attach-address-not-utf8.bin").read_bytes(), b"amqp:decode-error")
    assert ("close", "amqp:decode-error") in frames.errors(answer)
    assert emulator.handler.errors == 0


@pytest.mark.slow
def test_coverage_guided_fuzzing_never_breaks_the_emulator(tmp_path):
    seconds = int(float(os.environ.get("SBRULES_FUZZ_SECONDS", "30")))
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    command = [
        sys.executable, "-m", "tests.emulator.fuzz_emulator", str(tmp_path / "corpus"),
        f"-max_total_time={seconds}", f"-artifact_prefix={crashes}/", "-timeout=20", "-print_final_stats=1",
    ]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120)
    found = sorted(crashes.iterdir())
    if run.returncode != 0 or found:
        pytest.fail(
            f"the fuzzer broke the emulator (exit {run.returncode}); input(s) kept: {[str(p) for p in found]}. "
            f"Add each to {CORPUS} named for what it does, then fix the emulator.\n{run.stderr[-4000:]}"
        )
    print(*[line for line in run.stderr.splitlines() if re.search(r"\bDONE\b|stat::number_of_executed_units", line)])
