"""No client bytes stop the emulator: the kept corpus replayed, and a bounded fuzzing run over raw frames.

``corpus/`` holds inputs worth keeping: every one that ever stopped the emulator or failed a guard
(named for what it does) and seeds for the fuzzer's mutations. The fuzzer (``frames.py``) builds
sessions of hand-encoded frames with random fields and mutates corpus entries; it runs for
``SBRULES_FUZZ_SECONDS`` (60 by default) and, when an input breaks the emulator, saves it under
the test's temporary directory with the seed, to be added to ``corpus/``.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from . import frames
from .raw import RawManagement

CORPUS = Path(__file__).parent / "corpus"


def _still_serving(emulator) -> None:
    assert emulator.running
    assert emulator.handler.errors == 0
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        assert mgmt.request("com.microsoft:enumerate-rules", {"top": 10, "skip": 0})[0] == 200


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.bin")), ids=lambda p: p.stem)
def test_corpus_input_leaves_the_emulator_serving(emulator, path):
    frames.send(emulator.port, path.read_bytes())
    _still_serving(emulator)


def test_the_corpus_has_the_first_crash_and_the_fuzzers_first_find():
    assert (CORPUS / "duplicate-attach-link-name-not-utf8.bin").exists()
    assert (CORPUS / "fuzz-2781168411-attach-link-name-not-utf8.bin").exists()


def test_an_address_that_is_not_utf8_closes_the_connection_with_decode_error(emulator):
    answer = frames.answer_to(emulator.port, (CORPUS / "attach-address-not-utf8.bin").read_bytes(), b"amqp:decode-error")
    assert b"amqp:decode-error" in answer
    assert emulator.handler.errors == 0


@pytest.mark.slow
def test_fuzzed_frames_never_stop_the_emulator(emulator, tmp_path):
    seconds = float(os.environ.get("SBRULES_FUZZ_SECONDS", "60"))
    seeds = [path.read_bytes() for path in sorted(CORPUS.glob("*.bin"))]
    base = random.randrange(2**32)
    deadline = time.monotonic() + seconds
    runs = 0
    while time.monotonic() < deadline:
        seed = base + runs
        rng = random.Random(seed)
        data = frames.mutate(rng, rng.choice(seeds)) if seeds and rng.random() < 0.3 else frames.session(rng)
        frames.send(emulator.port, data, timeout=0.5)  # some inputs leave the connection open until a deadline
        runs += 1
        if not emulator.running or emulator.handler.errors:
            kept = tmp_path / f"fuzz-{seed}.bin"
            kept.write_bytes(data)
            pytest.fail(f"input {runs} (seed {seed}, {len(data)} bytes) broke the emulator; kept in {kept}: add it to {CORPUS}")
        if runs % 200 == 0:
            _still_serving(emulator)
    print(f"fuzzed {runs} inputs in {seconds:.0f} s (seeds {base}..{base + runs - 1})")
    _still_serving(emulator)
