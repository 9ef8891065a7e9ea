"""The ``sbrules`` command line: one click group whose commands load on first use.

Commands live in small modules beside this one and are imported only when invoked, so that
``sbrules validate`` never imports pyspark or proton it does not need.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from reconciler import __version__

#: command name → "module:attribute" of its click command.
COMMANDS = {
    "validate": "reconciler.cli.validate:validate",
    "render": "reconciler.cli.render:render",
    "sql": "reconciler.cli.sql:sql",
    "route": "reconciler.cli.sql:route",
    "test": "reconciler.cli.ruletest:test",
    "rules": "reconciler.cli.rules:rules",
    "emulator": "reconciler.cli.emulator:emulator",
    "plan": "reconciler.cli.reconcile:plan",
    "apply": "reconciler.cli.reconcile:apply",
    "drift": "reconciler.cli.reconcile:drift",
    "export": "reconciler.cli.reconcile:export",
    "demo": "reconciler.cli.reconcile:demo",
    "unlock": "reconciler.cli.unlock:unlock",
    "send": "reconciler.cli.send:send",
    "sample": "reconciler.cli.traffic:sample",
    "analyze": "reconciler.cli.analyze:analyze",
    "impact": "reconciler.cli.impact:impact",
    "show": "reconciler.cli.show:show",
    "topics": "reconciler.cli.entities:topics",
    "subscriptions": "reconciler.cli.entities:subscriptions",
}


class LazyGroup(click.Group):
    """A group that imports each command's module only when the command is used.

    Loading hides nothing: a module that fails to import is a bug in the build and ends in its
    traceback, like any other bug.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(super().list_commands(ctx)))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sbrules")
@click.option("-v", "--verbose", is_flag=True, help="Log what sbrules does, and show the exception behind an error.")
def cli(verbose: bool) -> None:
    """Rules-as-code for Azure Service Bus subscription filters."""
    configure_logging(verbose)


def configure_logging(verbose: bool) -> None:
    """Library logs (proton, the AMQP engine) reach stderr only with ``-v``: without it, what a
    user must know arrives as one error line, and a dropped socket is not worth a log line."""
    from reconciler.cli import output

    output.VERBOSE = verbose
    root = logging.getLogger()
    if verbose:
        logging.basicConfig(level=logging.DEBUG, handlers=[_Stderr()], format="sbrules: %(name)s: %(message)s")
        for noisy in ("py4j", "httpcore", "asyncio"):
            logging.getLogger(noisy).setLevel(logging.INFO)
    elif not root.handlers:
        root.addHandler(logging.NullHandler())
    # What a person waiting should hear (retries that last, a traffic report's phases), with or
    # without -v: on stderr, as plain lines or a terminal's live line (reconciler.cli.progress).
    from reconciler.cli.progress import LiveLine, PlainLines, stderr_handler

    progress = logging.getLogger("reconciler.progress")
    progress.setLevel(logging.INFO)
    for handler in [h for h in progress.handlers if isinstance(h, PlainLines | LiveLine)]:
        progress.removeHandler(handler)
        handler.close()
    if not verbose:  # with -v the root handler shows it, among the rest
        progress.addHandler(stderr_handler())
    progress.propagate = verbose


class _Stderr(logging.StreamHandler):
    """stderr as it is when a record is written, not when ``-v`` was given: an in-process caller
    (the tests) swaps it, and a library logging at interpreter exit (py4j) must not find it closed."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI; reconciler.cli.output turns failures into messages and exit codes."""
    from reconciler.cli.output import run

    run(cli, argv, prog_name="sbrules")
