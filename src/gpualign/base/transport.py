"""A transport failure, as both of gpualign's hand-written HTTP clients raise it (kube/reads.py to the API server,
ledger/exchange.py to registries): its kind, which tells the caller what it may do next, and a detail for people.
Each client words it for its users (an Unreachable naming the API server or the registry)."""

from __future__ import annotations

from enum import StrEnum


class FailureKind(StrEnum):
    """What a transport failure leaves the caller to do."""

    CONNECT = "connect"  # no connection was made (refused, or broken in its handshake): no request was sent, so
    # trying again is safe for any request
    CUT = "cut"  # a connection broke during the exchange: a read may be tried again
    TIMEOUT = "timeout"  # nothing came within the time allowed (the failure's step says where it waited)
    SLOW = "slow"  # an answer still arriving when its deadline passed
    LARGE = "large"  # an answer larger than the caller takes
    OTHER = "other"


class TransportFailure(Exception):
    """A transport failure: its kind (FailureKind); step says where a timeout waited; refused, for a CONNECT, that
    nothing answered at all (a refused connection, a name that does not resolve, no route), not a link that broke
    while the connection was being made."""

    def __init__(self, kind: FailureKind, detail: str, step: str = "", *, refused: bool = False) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.step = step
        self.refused = refused
