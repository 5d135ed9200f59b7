"""The trio's roles, once for the package: the draft writes steps, the PRM scores them, the target writes the steps
the PRM rejects. Each role runs on its own device (the system's ``draft``, ``prm`` and ``target``)."""
from __future__ import annotations

ROLES = ("draft", "prm", "target")
