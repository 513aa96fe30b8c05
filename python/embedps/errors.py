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
    """It exists already (a table of another spec, a checkpoint)."""

    code_name = "ALREADY_EXISTS"


class PermissionDeniedError(Error):
    """Not allowed."""

    code_name = "PERMISSION_DENIED"


class ResourceExhaustedError(Error):
    """A limit was reached (memory budget, message size)."""

    code_name = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(Error):
    """Not possible in this state (e.g. a push to a serving replica)."""

    code_name = "FAILED_PRECONDITION"


class AbortedError(Error):
    """The operation was aborted."""

    code_name = "ABORTED"


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


class DataLossError(Error):
    """Data was lost or corrupted."""

    code_name = "DATA_LOSS"


class UnauthenticatedError(Error):
    """Not authenticated."""

    code_name = "UNAUTHENTICATED"
