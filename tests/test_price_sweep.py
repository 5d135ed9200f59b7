"""The batched-price sweep (heterospec.replay.profiles.price_sweep): every pass of a point runs at the same context, the grid is
complete and in BATCH_PRICES_SCHEMA (DuckDB reads it), bad input is one line."""
from __future__ import annotations

import functools

import pytest
import torch

from heterospec.errors import UserError
from heterospec.replay.profiles.batch_prices import BATCH_PRICES_SCHEMA
from heterospec.replay.profiles.price_sweep import parse_ints, sweep, time_pass
from heterospec.store import read_parquet, write_parquet


def tiny_lm():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=64)
    return Qwen2ForCausalLM(cfg).eval()


def test_every_timed_pass_sees_the_same_context():
    """The cache is cut back after each pass: a point's repeats all read ``context`` cached tokens, never a growing
    cache (which would price batch B at ever longer contexts)."""
    model = tiny_lm()
    seen = []
    forward = model.forward

    @functools.wraps(forward)                  # the same signature: the sweep passes the cache as the model names it
    def spy(*args, **kw):
        cache = kw.get("past_key_values", kw.get("cache"))
        seen.append((cache.get_seq_length(), kw["input_ids"].shape))
        return forward(*args, **kw)

    model.forward = spy
    times = time_pass(model, "cpu", batch=3, context=10, tokens=2, repeats=4)
    assert len(times) == 4 and all(t > 0 for t in times)
    # the prefill of the context, one untimed warm-up pass, then the four timed ones: all after 10 cached tokens
    assert seen == [(0, (3, 10))] + [(10, (3, 2))] * 5
    seen.clear()
    time_pass(model, "cpu", batch=2, context=0, tokens=5, repeats=2)      # prefill: an empty cache every time
    assert seen == [(0, (2, 5))] * 3


def test_the_grid_is_complete_and_loads_in_duckdb(trained_models, tmp_path):
    import duckdb
    cfg, paths = trained_models.run(["experiment=ci"])
    rows = sweep(cfg, paths, "cpu", batches=(1, 2), contexts=(8, 24), step_tokens=4, repeats=2, say=lambda _: None)
    out = write_parquet(rows, tmp_path / "prices.parquet", BATCH_PRICES_SCHEMA)
    read_parquet(out, BATCH_PRICES_SCHEMA)
    got = duckdb.sql(f"SELECT role, phase, batch, context, tokens FROM '{out}' ORDER BY ALL").fetchall()
    want = sorted((role, phase, b, *{"prefill": (0, c), "decode": (c, 1), "score": (c, 4)}[phase])
                  for role, phases in (("draft", ("prefill", "decode")), ("prm", ("prefill", "score")),
                                       ("target", ("prefill", "decode")))
                  for phase in phases for b in (1, 2) for c in (8, 24))
    assert got == want
    assert all(r["ms_min"] <= r["ms"] <= r["ms_max"] and r["repeats"] == 2 and r["run"] == cfg.name for r in rows)


def test_bad_input_is_one_line(trained_models):
    cfg, paths = trained_models.run(["experiment=ci"])
    with pytest.raises(UserError, match="--batches 1,x"):
        parse_ints("1,x", "--batches")
    with pytest.raises(UserError, match="positive"):
        parse_ints("0,2", "--contexts")
    with pytest.raises(UserError, match="holds 256 positions"):
        sweep(cfg, paths, "cpu", batches=(1,), contexts=(250,), step_tokens=16, repeats=1, say=lambda _: None)
    if not torch.cuda.is_available():
        r = _sweep_cli("--device", "cuda:0", "experiment=ci")
        assert r.returncode == 2 and "no CUDA device" in r.stderr and "Traceback" not in r.stderr


def _sweep_cli(*args):
    import sys

    from conftest import run_cmd
    return run_cmd([sys.executable, "-m", "heterospec.replay.profiles.price_sweep", *args], timeout=300)
