"""Errors that reach a user as one line of text rather than a traceback."""


class UserError(Exception):
    """A mistake in what the user asked for; its message says what to do instead."""
