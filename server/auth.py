"""The admin token that guards the calls which change the server (the pool toggle, the repository calls,
shipped graphs): ``[server] admin_token``, or ``admin_token_file`` re-read when it changes.

A request names it as ``Authorization: Bearer <token>``. Without one it is 401; with a token that is not
the current one (a typo, or the token before a rotation) 401 too, as RFC 6750 answers an invalid token
(``WWW-Authenticate: Bearer error="invalid_token"``).
The file is looked at (a stat) at most once a second, on the request that needs it, and read only when its
size, mtime or inode changed: rotating the token is replacing the file (best with a rename, so no request
sees it half written), and the old token stops working within a second. A file that cannot be read, or
holds no token, refuses every such call until it is fixed (and says so in the log): never open.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from pathlib import Path

from poolserve.runtime.errors import UnauthenticatedError

log = logging.getLogger("poolserve")

CHECK_EVERY_S = 1.0  # how often the token file is looked at, at most


class TokenError(UnauthenticatedError):
    """401 with RFC 6750's ``WWW-Authenticate: Bearer`` (``error="invalid_token"`` for a wrong one)."""

    def __init__(self, message: str, invalid: bool) -> None:
        super().__init__(message)
        self.invalid = invalid

    @property
    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer error="invalid_token"' if self.invalid else "Bearer"}


class AdminToken:
    """The current admin token: a fixed one, one from a file, or none (the calls are open)."""

    def __init__(self, token: str | None = None, path: str | Path | None = None) -> None:
        self._token = token or None
        self._path = Path(path) if path else None
        self._print: tuple[int, int, int] | None = None
        self._checked = 0.0
        self._problem = ""  # why the file gives no token (logged once per change)
        if self._path is not None:
            self._reload()
            if self._token is None:
                raise ValueError(f"admin_token_file: {self._problem}")
            self._checked = time.monotonic()

    def check(self, headers: Mapping[str, str]) -> None:
        """Refuses a request without the current token (UnauthenticatedError), when one guards the
        calls."""
        if self._path is None and self._token is None:
            return
        auth = headers.get("authorization", "")
        scheme, _, given = auth.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise TokenError("This endpoint needs 'Authorization: Bearer <admin_token>'", invalid=False)
        token = self.current()
        if token is None:
            raise TokenError(
                "The admin token is not valid (the server has no token to check it)", invalid=True
            )
        if not secrets.compare_digest(given.strip().encode(), token.encode()):
            raise TokenError("The admin token is not valid", invalid=True)

    def current(self) -> str | None:
        """The token now (the file's, re-read when it changed, looked at once a second at most)."""
        if self._path is not None:
            now = time.monotonic()
            if now - self._checked >= CHECK_EVERY_S:
                self._checked = now
                self._reload()
        return self._token

    def _reload(self) -> None:
        assert self._path is not None
        try:
            st = self._path.stat()
            found = (st.st_ino, st.st_mtime_ns, st.st_size)
            if found == self._print:
                return
            text = self._path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            self._fail(f"cannot read {self._path}: {getattr(e, 'strerror', None) or e}")
            return
        self._print = found
        lines = text.strip().splitlines()
        token = lines[0].strip() if lines else ""
        if not token:
            self._fail(f"{self._path} holds no token")
            return
        if self._token is not None and token != self._token:
            log.info("admin token replaced from %s", self._path)
        self._token, self._problem = token, ""

    def _fail(self, problem: str) -> None:
        if problem != self._problem:
            log.error("admin token: %s; the calls it guards are refused until it is fixed", problem)
        self._token, self._problem, self._print = None, problem, None
