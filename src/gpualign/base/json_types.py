"""The shapes of a Kubernetes object as gpualign passes it around before reading its fields: JSON, an object it may
change (a dict, as the API server's answer decodes), and ReadOnlyJSON, one it only reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]
ReadOnlyJSON = Mapping[str, Any]
