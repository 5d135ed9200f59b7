"""The draft implementations a collect can draft with (``collect.draft``): the names and their one-line check. Which
one a collect uses is :func:`heterospec.config.collect_variants.draft_implementation`."""
from __future__ import annotations

from heterospec.errors import UserError

DRAFTS = ("model", "w8a8")      # the trained checkpoint in torch; the quantize stage's int8 export in torch


def check_draft(impl: str, key: str, boards) -> str:
    """``impl`` (the value of config ``key``) is ``model``, ``w8a8`` or a board of ``boards``; one line otherwise."""
    if impl not in DRAFTS and impl not in boards:
        raise UserError(f"{key}: '{impl}', expected one of {[*DRAFTS]} or a board of hls.boards {list(boards)}")
    return impl


def is_board(impl: str) -> bool:
    """Whether a draft implementation names a board (its generated kernel drafts)."""
    return impl not in DRAFTS
