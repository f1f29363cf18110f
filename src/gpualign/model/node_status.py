"""What check finds of a GPU node's driver image: the word of its STATUS column and JSON `status`. Pure, and
small: the command line reads it before a cluster's LISTs go out, the audit that decides it loads beside them."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """What check finds of a GPU node's driver image (its STATUS column and JSON `status`)."""

    PRESENT = "present"
    MISSING = "missing"
    UNKNOWN = "unknown"  # no tag can be named (its reason says why)
    HOST_MANAGED = "host-managed"  # the driver is installed on the host, not by a driver pod
    OPERATOR_MISMATCH = "operator-mismatch"  # the operator deploys (or would) an image built for another kernel or OS
    WRONG_IMAGE = "wrong-image"  # in the ledger under the right tag, but not what the tag says (present but wrong)
