"""Image ops: resizing."""

from __future__ import annotations
