"""The errors embedps raises: one class per gRPC status code.

Every error of a call that reached (or tried to reach) a server is an
``embedps.Error`` carrying ``code`` (the gRPC status code, an int) and
``code_name``; the message is the server's (or the client's, naming the
shard and the attempts). Arguments refused before anything is sent raise
``TypeError`` (wrong dtype) or ``ValueError`` (wrong shape, non-contiguous
array, sizes that do not match).
"""


class Error(Exception):
    """A failed embedps call."""

    code_name = "UNKNOWN"

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}"


class CancelledError(Error):
    """The call was cancelled."""

    code_name = "CANCELLED"


class UnknownError(Error):
    """An error of no known kind."""

    code_name = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    """An argument was refused (by the server or the client)."""

    code_name = "INVALID_ARGUMENT"


class DeadlineExceededError(Error, TimeoutError):
    """A deadline passed (e.g. a SYNC pull waited too long for other workers)."""

    code_name = "DEADLINE_EXCEEDED"


class NotFoundError(Error):
    """A table, checkpoint or file is missing."""

    code_name = "NOT_FOUND"


class AlreadyExistsError(Error):
    """It exists already (a checkpoint directory of that name)."""

    code_name = "ALREADY_EXISTS"


class PermissionDeniedError(Error):
    """Not allowed."""

    code_name = "PERMISSION_DENIED"


class ResourceExhaustedError(Error):
    """A limit was reached (memory budget, message size)."""

    code_name = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(Error):
    """Not possible in this state (e.g. a push to a serving replica, a
    table re-created with another spec)."""

    code_name = "FAILED_PRECONDITION"


# What a Python training program does when a shard is lost or restarted
# (docs/python.md "When a server is lost").
_RECOVERY = ("In Python: make a new embedps.Client once every shard is up, "
             "client.load(checkpoint_root) to restore the last checkpoint, "
             "and set each embedps.torch module's step to that checkpoint's "
             "step (docs/python.md \"When a server is lost\")")


class AbortedError(Error):
    """The operation was aborted (e.g. a shard restarted under the job)."""

    code_name = "ABORTED"

    def __str__(self) -> str:
        return f"{super().__str__()}. {_RECOVERY}"


class OutOfRangeError(Error):
    """Out of range."""

    code_name = "OUT_OF_RANGE"


class UnimplementedError(Error):
    """Not implemented by the server."""

    code_name = "UNIMPLEMENTED"


class InternalError(Error):
    """An internal error of the server."""

    code_name = "INTERNAL"


class UnavailableError(Error, ConnectionError):
    """A server could not be reached (after retries)."""

    code_name = "UNAVAILABLE"

    def __str__(self) -> str:
        return (f"{super().__str__()}. If that server is gone for good: {_RECOVERY}")


class DataLossError(Error):
    """Data was lost or corrupted."""

    code_name = "DATA_LOSS"


class UnauthenticatedError(Error):
    """Not authenticated."""

    code_name = "UNAUTHENTICATED"
