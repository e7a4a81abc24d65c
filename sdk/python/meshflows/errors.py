"""Errors of the MeshFlows wire contract."""

from typing import Any, Dict, List, Optional


class APIError(Exception):
    """An error answer of a MeshFlows server: its HTTP status and the error body's code,
    message and details. ``retry_after`` is the Retry-After it carried, in seconds."""

    def __init__(self, status: int, code: str, message: str, details: Optional[List[Dict[str, Any]]] = None,
                 retry_after: Optional[float] = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []
        self.retry_after = retry_after


class TransportError(Exception):
    """The registry could not be reached, or answered with something that is not the contract."""
