"""The documentation's command examples as data: where they are, what to run, what the page shows,
and the rule that compares a run's output with it (CONTRIBUTING.md: "Contributor notes").

An example is a ```console block: lines starting with ``$ `` are commands (a trailing ``\\`` continues
one on the next line), the lines after a command are its output as a terminal shows it (stdout and
stderr together). The HTML comment on the line before a block may say ``<!-- readme-example: skip REASON -->``,
``<!-- readme-example: fixture NAME [NAME...] -->``, or ``<!-- readme-example: continue -->``: the
block runs after the previous one, in the same directory and with the same fixtures (a walk-through
split by prose).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace

ELLIPSIS = "…"
DIRECTIVE = re.compile(r"^<!--\s*readme-example:\s*(?P<verb>skip|fixture|continue)\b\s*(?P<rest>.*?)\s*-->$")
PROMPT = "$ "


@dataclass(frozen=True)
class Command:
    line: int  #: page line of the command
    text: str
    expected: tuple[str, ...]


@dataclass(frozen=True)
class Example:
    line: int  #: page line of the opening fence
    commands: tuple[Command, ...]
    fixtures: tuple[str, ...] = ()
    skip: str | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        first = self.commands[0].text.split()[:3] if self.commands else ["empty"]
        return f"L{self.line}-" + "-".join(re.sub(r"[^\w.-]", "", word) for word in first)


def parse(text: str) -> list[Example]:
    """Every ```console block of ``text``, with its directive."""
    lines = text.splitlines()
    examples = []
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```console":
            index += 1
            continue
        start = index
        directive = _directive(lines, start)
        index += 1
        body = []
        while index < len(lines) and lines[index].strip() != "```":
            body.append((index + 1, lines[index]))
            index += 1
        example = _example(start + 1, body, directive)
        if directive and directive[0] == "continue":
            if not examples:
                example = replace(example, problems=example.problems + ("continue: no example before it",))
            else:
                previous = examples.pop()
                example = replace(previous, commands=previous.commands + example.commands,
                                  problems=previous.problems + example.problems)
        examples.append(example)
        index += 1
    return examples


def _directive(lines: list[str], fence: int) -> tuple[str, str] | None:
    previous = fence - 1
    while previous >= 0 and not lines[previous].strip():
        previous -= 1
    match = DIRECTIVE.match(lines[previous].strip()) if previous >= 0 else None
    return (match["verb"], match["rest"]) if match else None


def _example(line: int, body: list[tuple[int, str]], directive: tuple[str, str] | None) -> Example:
    commands: list[Command] = []
    problems = []
    current: tuple[int, str] | None = None
    output: list[str] = []
    continued = False
    for number, text in body:
        if continued:
            assert current is not None
            current = (current[0], current[1] + "\n" + text)
            continued = text.endswith("\\")
        elif text.startswith(PROMPT):
            if current is not None:
                commands.append(Command(current[0], current[1], _trim(output)))
            current, output = (number, text[len(PROMPT) :]), []
            continued = text.endswith("\\")
        elif current is None:
            problems.append(f"line {number}: output before the first `$ ` command")
        else:
            output.append(text)
    if current is not None:
        commands.append(Command(current[0], current[1], _trim(output)))
    if not commands:
        problems.append("a console block with no `$ ` command")
    fixtures: tuple[str, ...] = ()
    skip = None
    if directive and directive[0] == "skip":
        skip = directive[1]
        if not skip:
            problems.append("skip needs a reason")
    elif directive and directive[0] == "fixture":
        fixtures = tuple(directive[1].replace(",", " ").split())
    return Example(line, tuple(commands), fixtures, skip, tuple(problems))


def _trim(lines: list[str]) -> tuple[str, ...]:
    out = [line.rstrip() for line in lines]
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return tuple(out)


# ------------------------------------------------------------------------------------------------
# Comparing output
# ------------------------------------------------------------------------------------------------

#: What may differ between a page and a run: applied to both sides before comparing.
NORMALISE = (
    (re.compile(r"\b(127\.0\.0\.1|localhost):\d+"), r"\1:<port>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s)\b"), "<duration>"),
)


def normalise(lines: tuple[str, ...] | list[str], workdir: str | None = None) -> tuple[str, ...]:
    out = []
    for line in lines:
        if workdir:
            line = line.replace(workdir.rstrip("/") + "/", "").replace(workdir, ".")
        for pattern, replacement in NORMALISE:
            line = pattern.sub(replacement, line)
        out.append(line.rstrip())
    return _trim(out)


def matches(expected: tuple[str, ...], actual: tuple[str, ...]) -> bool:
    """Line by line; a line that is only ``…`` stands for any number of lines (none included), and
    ``…`` inside a line for any text within that line."""
    pattern = []
    for line in expected:
        if line.strip() == ELLIPSIS:
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append("[^\n]*".join(re.escape(part) for part in line.split(ELLIPSIS)) + r"\n")
    return re.fullmatch("".join(pattern), "".join(line + "\n" for line in actual)) is not None


def explain(command: Command, expected: tuple[str, ...], actual: tuple[str, ...]) -> str:
    diff = difflib.unified_diff(list(expected), list(actual), "documented", "actual run", lineterm="", n=2)
    return f"line {command.line}: `{command.text}` printed something else:\n" + "\n".join(diff)
