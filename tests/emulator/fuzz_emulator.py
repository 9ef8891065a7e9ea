"""The coverage-guided fuzzer of the emulator's AMQP server: atheris (libFuzzer) over ``inprocess.check``.

    python -m tests.emulator.fuzz_emulator CORPUS_DIR [libFuzzer options, e.g. -max_total_time=60]

Run from the repository root. Every ``reconciler`` module is instrumented, so libFuzzer's coverage
feedback follows the server's branches (the handler, `$cbs`, `$management`, the SQL parser that
add-rule reaches, the wire codec) and keeps the inputs that reach new ones. An input is one client
connection's bytes; it fails when ``inprocess.check`` does: an exception out of the loop, an error
inside a guard, state left behind, or a next client left unanswered. libFuzzer then writes the input
to ``-artifact_prefix``; it belongs in ``tests/emulator/corpus/``.

``CORPUS_DIR`` is seeded first with the kept corpus (``corpus/*.bin`` and ``corpus/coverage/``), the
valid sessions of ``frames.seeds`` and grammar-built sessions (``frames.session``: values libFuzzer's
byte mutations would seldom invent, such as 70,000-byte strings and nested described values).
"""

from __future__ import annotations

import hashlib
import logging
import random
import shlex
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["reconciler"]):
    from tests.emulator import frames, inprocess

CORPUS = Path(__file__).parent / "corpus"
GRAMMAR_SEEDS = 200


def seed(directory: Path) -> None:
    """Write the starting inputs into ``directory`` (named by content, as libFuzzer names its own)."""
    directory.mkdir(parents=True, exist_ok=True)
    inputs = [path.read_bytes() for path in [*CORPUS.glob("*.bin"), *CORPUS.glob("coverage/*")]]
    inputs += frames.seeds().values()
    inputs += [frames.session(random.Random(n)) for n in range(GRAMMAR_SEEDS)]
    for data in inputs:
        (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


def test_one_input(data: bytes) -> None:
    inprocess.check(inprocess.emulator(), data)


def main(argv: list[str]) -> None:
    # What the emulator and proton log for malformed input is expected; a failure's log is in its message.
    logging.getLogger().addHandler(logging.NullHandler())
    logging.getLogger("proton").setLevel(logging.CRITICAL)
    corpus = next((arg for arg in argv[1:] if not arg.startswith("-")), None)
    if corpus is not None and not any(arg.startswith("-merge") for arg in argv):
        seed(Path(corpus))
    # libFuzzer runs argv[0] through the shell for -merge=1: it must be this module, not its file.
    command = f"{shlex.quote(sys.executable)} -m tests.emulator.fuzz_emulator"
    atheris.Setup([command, *argv[1:]], test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
