"""The batch kernel as a serving run's draft (heterospec.hls.kernel_serving): the ci trio served with the U280
kernel drafting up to four requests' commands a pass (and as a lane, one write at a time) at loads 1 and 8, every served request
reasoning exactly as the sequential collect with the kernel draft does (answer, output, steps, verdicts, calls and
the KVMU log); passes of up to four requests, and four reached."""
from __future__ import annotations

import shutil

import pytest

from conftest import collect_and_serve, copy_quantized
from heterospec.hls import stage as hls
from heterospec.replay.validation.against_serving import SERVING_OUTPUTS_SCHEMA
from heterospec.store import read_parquet

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
OVERRIDES = ["experiment=ci", "collect.limit=4", "collect.draft=u280", "serving.problems=4", "serving.requests=6",
             "serving.loads=[1.0,8.0]", "serving.repeats=1", "serving.max_batch.prm=2", "serving.max_batch.target=3"]


@pytest.fixture(scope="module", params=[1, 4], ids=["lane", "B=4"])
def served(request, trained_models, ci_quantized):
    """The kernel drafting up to B requests' commands a pass (B = 1: the dispatcher's lane, one write at a time)."""
    overrides = [*OVERRIDES, f"serving.max_batch.draft={request.param}"]
    cfg, paths = trained_models.run(overrides)
    copy_quantized(ci_quantized, paths)
    hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"))
    return cfg, paths, collect_and_serve(cfg, paths, overrides)


def test_served_requests_with_the_batch_kernel_reason_as_the_sequential_kernel_collect(served):
    cfg, paths, tables = served
    rows = read_parquet(paths.serving_outputs, SERVING_OUTPUTS_SCHEMA).to_pylist()
    assert len(rows) == 2 * 6
    for r in rows:
        assert (r["identical_answer"], r["identical_output"], r["identical_steps"], r["identical_verdicts"],
                r["identical_calls"], r["identical_kvmu"]) == (True,) * 6, r
    assert len(tables["kvmu"]) > 0                          # the kernel's registers, logged per request
    impls = {c["impl"] for c in tables["calls"].to_pylist() if c["role"] == "draft"}
    assert impls == {"kernel:u280"}
    draft = [p for p in tables["passes"].to_pylist() if p["role"] == "draft"]
    if int(cfg.serving.max_batch.draft) == 1:                 # the lane: one write at a time
        assert max(p["batch"] for p in draft) == 1
    else:                                                     # requests shared passes, never more than four
        assert any(p["batch"] > 1 for p in draft) and max(p["batch"] for p in draft) <= 4
