"""Variables: VariableV2/Assign (reference style) and VarHandleOp/ReadVariableOp/AssignVariableOp (resources).

Their values live in the session's ``ResourceContainer`` (``OpContext.resources``).
"""

from __future__ import annotations
