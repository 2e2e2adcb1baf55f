"""Errors that reach a user as one line of text rather than a traceback, and the commands' exit codes."""

#: Exit codes, for schedulers and scripts that act on them.
EXIT_FAILED = 1  # the command's answer is no: a regression found, a trial that did not complete, a gate failure
EXIT_BAD_INPUT = 2  # a mistake in what was asked (one line on stderr says what to do instead)
EXIT_JOB_ERROR = 3  # the harness could not do the work (a trial that never reached its variant, a runner error):
#                     a fault of the machine or the installation, never a verdict on a kernel


class UserError(Exception):
    """A mistake in what the user asked for; its message says what to do instead."""


def syntax_error(e: SyntaxError) -> str:
    """``e`` as "a syntax error at line N: why"; without the line where Python names none (a null byte)."""
    return f"a syntax error{f' at line {e.lineno}' if e.lineno else ''}: {e.msg}"
