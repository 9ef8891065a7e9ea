"""The bases of the errors a user can cause: the CLI prints these without a traceback
(reconciler/cli/output.py classifies them and chooses the exit code)."""


class SbrulesError(Exception):
    """An error with a message a person can act on."""


class InputError(SbrulesError):
    """A file or value given to a command (other than rule files) cannot be used."""
