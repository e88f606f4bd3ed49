"""Plain Starlette routes for the inference endpoints, ahead of FastAPI's routers (see ``server.app``)."""

from __future__ import annotations

from typing import Any

from starlette import routing


class Route(routing.Route):
    """A Starlette route that, like FastAPI's, puts itself in the scope as ``route`` when it matches: the
    metrics label requests by its path template."""

    def matches(self, scope: Any) -> tuple[routing.Match, Any]:
        match, child = super().matches(scope)
        if match is not routing.Match.NONE:
            child["route"] = self
        return match, child
