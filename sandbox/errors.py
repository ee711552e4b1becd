"""Exceptions of the sandbox layer."""


class SandboxError(Exception):
    """Base of every sandbox exception."""


class InfraError(SandboxError):
    """The sandbox itself failed (engine down or slow, runner lost). Never a reward of 0."""


class EngineUnreachable(InfraError):
    """The Docker engine does not answer at all (no socket, connection refused): dockerd is down or elsewhere."""


class ImageMissing(InfraError):
    """The workspace image is not on the engine: a set-up fault, named with the command that builds it."""


class BudgetExceeded(SandboxError):
    """An episode budget (wall clock, number of calls) is spent; the call was not run."""


class WorkspaceClosed(SandboxError):
    """The workspace was released; no more calls."""


class SandboxConfigError(SandboxError, ValueError):
    """A sandbox config file that cannot be used; the message names the file and the field."""
