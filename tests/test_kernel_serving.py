"""The batch kernel as a serving run's draft (heterospec.hls.kernel_serving): the ci trio served with the U280
kernel drafting up to four requests' commands a pass, every served request reasoning exactly as the sequential
collect with the kernel draft does (answer, output, steps, verdicts, calls and the KVMU log), passes of more than
one request, none of more than four."""
from __future__ import annotations

import shutil

import pytest

from conftest import collect_and_serve, copy_quantized
from heterospec.hls import stage as hls
from heterospec.replay.validation.against_serving import SERVING_OUTPUTS_SCHEMA
from heterospec.store import read_parquet

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
OVERRIDES = ["experiment=ci", "collect.limit=4", "collect.draft=u280", "serving.problems=4", "serving.requests=6",
             "serving.loads=[8.0]", "serving.repeats=1", "serving.max_batch.draft=4", "serving.max_batch.prm=2",
             "serving.max_batch.target=3"]


@pytest.fixture(scope="module")
def served(trained_models, ci_quantized):
    cfg, paths = trained_models.run(OVERRIDES)
    copy_quantized(ci_quantized, paths)
    hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"))
    return cfg, paths, collect_and_serve(cfg, paths, OVERRIDES)


def test_served_requests_with_the_batch_kernel_reason_as_the_sequential_kernel_collect(served):
    cfg, paths, tables = served
    rows = read_parquet(paths.serving_outputs, SERVING_OUTPUTS_SCHEMA).to_pylist()
    assert len(rows) == 6
    for r in rows:
        assert (r["identical_answer"], r["identical_output"], r["identical_steps"], r["identical_verdicts"],
                r["identical_calls"], r["identical_kvmu"]) == (True,) * 6, r
    assert len(tables["kvmu"]) > 0                          # the kernel's registers, logged per request
    impls = {c["impl"] for c in tables["calls"].to_pylist() if c["role"] == "draft"}
    assert impls == {"kernel:u280"}
    draft = [p for p in tables["passes"].to_pylist() if p["role"] == "draft"]
    assert any(p["batch"] > 1 for p in draft) and max(p["batch"] for p in draft) <= 4
