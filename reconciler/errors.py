"""The base of every error a user can cause: the CLI prints these without a traceback."""


class SbrulesError(Exception):
    """An error with a message a person can act on; the CLI exits 1 and prints only the message."""

    exit_code = 1
