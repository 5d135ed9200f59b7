"""DFVG: token-level speculative decoding with confidence-driven dynamic draft trees.

The decoding itself (draft tree, drafter, strategies, tree verification, the round loop) is
:mod:`heterospec.speculative`, shared with the reasoning engine's speculative target writes. This package is the
DFVG stage around it:

* :mod:`.engine`      the baselines: the target's plain greedy decoding, Hugging Face assisted generation
* :mod:`.methods`     the pair, the prompts and one method's run
* :mod:`.traces`      versioned Parquet schemas of rounds and generations
* :mod:`.replay`      prices the rounds on an FPGA + GPU system (:mod:`heterospec.replay.schedules.dfvg`)
"""
