"""The package's exceptions: every refusal or failure is a ringattn.Error
raised on every rank alike; one of an argument's type is also a
TypeError (ringattn.ArgumentTypeError), one of an argument's or input's
value also a ValueError (ringattn.ArgumentError), as Python's own
functions raise them. Local refusals travel between ranks as
(message, status, kind) and are raised again by error()."""
from ._core import ArgumentError, ArgumentTypeError, Error

# Exception classes by the kind a refusal travels as.
KINDS = {"type": ArgumentTypeError, "value": ArgumentError, None: Error}


def error(text, status="invalid argument", kind=None):
    """A ringattn.Error carrying a status name, as the library's do; kind
    "type" or "value" makes it a TypeError or a ValueError too."""
    exc = KINDS[kind](text)
    exc.status = status
    return exc


def kind_of(exc):
    """The kind of a refusal: "type", "value" or None."""
    if isinstance(exc, TypeError):
        return "type"
    if isinstance(exc, (ValueError, OverflowError)):
        return "value"
    return None


def refusal_of(exc):
    """A local refusal as (message, status, kind), to be agreed."""
    status = getattr(exc, "status", "invalid argument")
    return str(exc), status, kind_of(exc)
