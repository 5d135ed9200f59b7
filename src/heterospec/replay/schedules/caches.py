"""How much of the current context a model holds in its KV cache: a leaf the pipeline and the mechanisms share."""
from __future__ import annotations


class Cached:
    """How much of the current context a model (the target, the PRM) holds in its KV cache. Contexts grow step by
    step or roll back to a prefix; after a rejection the caller drops the cache to the prefix that stays valid."""
    __slots__ = ("len",)

    def __init__(self):
        self.len = 0

    def read(self, context: int) -> int:
        """Tokens of ``context`` the model must still process; afterwards it holds all of them."""
        new = context - self.len if context > self.len else 0
        self.len = context
        return new

    def drop_to(self, prefix: int) -> None:
        if self.len > prefix:
            self.len = prefix
