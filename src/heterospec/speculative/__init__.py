"""Token-level speculative decoding: a draft proposes a tree of continuations (a chain is a tree of width one), the
target checks the whole tree in one forward pass with a tree attention mask, the longest path the target agrees with
is kept, and both KV caches are compacted to that path. One implementation, used by the DFVG stage
(:mod:`heterospec.dfvg`) and by the reasoning engine's target writes (:mod:`.stepwise`).

* :mod:`.tree`        the draft tree: nodes in breadth-first order, attention mask, positions
* :mod:`.lean`        the draft's decoder: the Qwen2 forward over a fixed KV buffer (the FPGA kernel's software twin)
* :mod:`.drafter`     grows a tree (or chain) from the draft's confidence
* :mod:`.strategies`  how much to draft each round: chain, Hugging Face's heuristic, DFVG's feedback, dynamic tree
* :mod:`.verify`      tree verification on the target: greedy (lossless) or speculative sampling, KV compaction
* :mod:`.decoder`     the decoding loop and its per-round trace
"""
