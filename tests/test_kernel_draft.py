"""The generated HLS kernel as the draft role (issue 24): built as a shared library and driven through its own KVMU
commands, it writes the same steps as the torch int8 reference (the oracle: ``StepWriter.plain`` over
``load_quantized_draft``) and its pointer log, read from the kernel's registers, equals the Python KVMU's; BRSD with
backtracking through a Session reaches the same outcomes with it as with the reference; one-line errors."""
from __future__ import annotations

import json
import pickle
import shutil
from types import SimpleNamespace

import pytest

from conftest import copy_quantized
from heterospec.models.role_manifest import read_manifest
from heterospec.config import compose_config
from heterospec.errors import UserError
from heterospec.hls import stage as hls
from heterospec.hls.kernel_draft import KernelDecoding, KernelRecipe
from heterospec.hls.kernel_lib import KernelInstance, build_library
from heterospec.models.loading import load_tokenizer
from heterospec.models.prompts import format_prompt
from heterospec.paths import ROLES
from heterospec.reasoning.kvcache import ACCEPT, INIT, ROLLBACK, SPECULATION
from heterospec.reasoning.roles import StepWriter
from heterospec.reasoning.session import Session
from heterospec.reasoning.workers import RoleSpec
from heterospec.tasks import load_problems

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
OVERRIDES = ["experiment=ci", "collect.limit=6"]


@pytest.fixture(scope="module")
def kernel(trained_models, ci_quantized):
    """(cfg, paths, export dir, kernel dir, library): the ci trio's W8A8 draft, its U280 kernel and library."""
    cfg, paths = trained_models.run(OVERRIDES)
    copy_quantized(ci_quantized, paths)
    hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"))
    src = paths.hls_codegen("u280").parent
    return cfg, paths, paths.quantized_draft.parent.resolve(), src, build_library(src)


def _writers(kernel):
    from heterospec.quantize.model import load_quantized_draft
    cfg, _, export, src, lib = kernel
    tok = load_tokenizer(str(export), "draft")
    dec = KernelDecoding(KernelInstance(lib, src), str(src))
    delim = cfg.models.step_separator
    return tok, StepWriter(dec, tok, delim, dec.kvmu), StepWriter.plain(load_quantized_draft(export), tok, delim,
                                                                        kvmu=True)


def _script(w, prompt: list[int], vocab: int) -> list[tuple]:
    """A sequence of writes as the executors issue them: draft, reject with a shared first token (a re-init keeping
    it), draft, a step drafted ahead, accept + a step ahead (the one drafted ahead goes to the PRM), reject of a step
    drafted ahead that shares a token with the rewrite, a backtrack into accepted steps, the same context again, a
    reject sharing nothing (rollback + shadow sync of the target's tokens)."""
    other = lambda t: (t + 1) % vocab                            # noqa: E731  (a stand-in for the target's token)
    P, out = len(prompt), []

    def write(ctx, valid, n=12):
        s = w.write(ctx, valid, n)
        out.append((s.tokens, s.complete, s.eos))
        return s.tokens

    s1 = write(prompt, P)
    t1 = [s1[0], other(s1[1]), other(s1[0])]                     # rejected; the target's step shares a token
    a = prompt + t1
    s2 = write(a, len(a))
    s3 = write(a + s2, len(a))                                   # drafted ahead of s2's verdict
    s4 = write(a + s2 + s3, len(a) + len(s2))                    # s2 accepted; s4 ahead of s3's verdict
    t3 = [s4[0], other(s4[1])] if len(s4) > 1 else [other(s4[0])]
    b = a + s2 + s3 + t3                                         # s3 accepted, s4 rejected: a shared token
    write(b, len(b), 6)
    c = a + [other(s2[0])] * 2                                   # backtrack: the target rewrites s2's position
    write(c, len(c))
    s7 = write(c, len(c), 1)                                     # the same context again: one token
    d = c + [other(s7[0])]                                       # rejected; the target's step shares nothing
    write(d, len(d))
    return out


def test_kernel_writes_the_int8_reference_steps_and_its_registers_log_the_python_kvmu(kernel):
    cfg, *_ = kernel
    tok, kw, pw = _writers(kernel)
    problem = load_problems(cfg.dataset, 1)[0]
    prompt = tok(format_prompt(cfg.models.prompt, problem.question, tok))["input_ids"]
    for w in (kw, pw):
        w.reset(0)
    got, want = _script(kw, prompt, len(tok)), _script(pw, prompt, len(tok))
    assert got == want and sum(len(s[0]) for s in got) > 30
    rows = lambda w: [r[1:] for r in w.kvmu.log]                 # noqa: E731  (mode, valid, current, ahead, why)
    assert rows(kw) == rows(pw)
    assert {r[-1] for r in rows(kw)} >= {"prompt", "draft", "step_ahead", "reject", "backtrack", "shadow_sync", "prm"}
    assert {r[0] for r in rows(kw)} == {INIT, SPECULATION, ACCEPT, ROLLBACK}
    # every pointer the kernel reports is its own: the instance ran one draft_step per command
    assert kw.decoding.k.calls >= kw.processed >= sum(len(s[0]) for s in got)


def test_drafting_ahead_cancelling_and_accepting_write_each_token_once(kernel):
    """Tokens the kernel processes, counted by hand, for a step drafted ahead and accepted, one cancelled, a reject
    sharing two tokens with the rewrite and an accept of the step drafted after it. Steps end at the token limit
    only (a delimiter that never occurs): 4 tokens each. The torch int8 draft (its own prefix cache) processes what
    its own hand count says, and the two KVMU logs are the rows worked out here."""
    from heterospec.quantize.model import load_quantized_draft
    cfg, _, export, src, lib = kernel
    tok = load_tokenizer(str(export), "draft")
    dec = KernelDecoding(KernelInstance(lib, src), str(src))
    kw = StepWriter(dec, tok, "<never>", dec.kvmu)
    pw = StepWriter.plain(load_quantized_draft(export), tok, "<never>", kvmu=True)
    problem = load_problems(cfg.dataset, 1)[0]
    prompt = tok(format_prompt(cfg.models.prompt, problem.question, tok))["input_ids"]
    P, other = len(prompt), (lambda t: (t + 1) % len(tok))       # noqa: E731

    def after(n):                                                # cancelled once n tokens are written
        asked = iter(range(10))
        return lambda: next(asked) >= n

    def script(w) -> tuple[list[int], list[list[int]]]:
        w.reset(0)
        fed, steps = [], []

        def write(ctx, valid, cancelled=lambda: False):
            p0 = w.processed
            step = w.write(ctx, valid, 4, cancelled=cancelled)
            steps.append(step.tokens)
            fed.append(w.processed - p0)
            assert sum(c.tokens_in for c in step.calls) == fed[-1]        # the trace's calls say so too
            return steps[-1]

        s1 = write(prompt, P)                                    # for the PRM
        s2 = write(prompt + s1, P)                               # drafted ahead of s1's verdict
        write(prompt + s1 + s2, P + 4, after(2))                 # s1 accepted, s2 verified; s3 ahead, cancelled
        t2 = s2[:2] + [other(s2[2])]                             # s2 rejected; the target's step shares 2 tokens
        s4 = write(prompt + s1 + t2, P + 4)                      # drafted ahead of t2's verdict
        write(prompt + s1 + t2 + s4, P + 7)                      # t2 accepted, s4 verified; s5 ahead
        return fed, steps

    (kfed, ksteps), (pfed, psteps) = script(kw), script(pw)
    assert ksteps == psteps and [len(x) for x in ksteps] == [4, 4, 2, 4, 4]
    # by hand, the kernel: the prompt + s1 (its last token marked for the PRM); s2 with its last token held back;
    # that token (marked: s2 goes to the PRM) + s3's 2; t2's new token after a re-init keeping the shared 2, + s4
    # less its last; s4's last + s5 less its last
    assert kfed == [P + 4, 3, 1 + 2, 1 + 3, 1 + 3]
    # by hand, torch: a step cut at the limit feeds its 4th token in the loop, and the next write, its context fully
    # cached, feeds that token again for its logits; a cancelled step's tokens are all fed; t2's new token is fed
    assert pfed == [P + 4, 1 + 4, 1 + 2, 1 + 4, 1 + 4] and sum(kfed) == sum(pfed) - 4
    rows = lambda w: [r[1:] for r in w.kvmu.log]                 # noqa: E731
    assert rows(kw) == rows(pw) == [
        (INIT, P, P, P, "prompt"), (SPECULATION, P, P + 4, P + 4, "draft"),
        (SPECULATION, P, P + 4, P + 7, "step_ahead"),
        (ACCEPT, P + 4, P + 8, P + 8, "prm"), (SPECULATION, P + 4, P + 8, P + 10, "step_ahead"),
        (INIT, P + 7, P + 7, P + 7, "reject"), (SPECULATION, P + 7, P + 7, P + 10, "step_ahead"),
        (ACCEPT, P + 7, P + 11, P + 11, "prm"), (SPECULATION, P + 7, P + 11, P + 14, "step_ahead")]


BRSD = OVERRIDES + ["algorithm=brsd", "collect.draft=w8a8"]


@pytest.fixture(scope="module")
def brsd(kernel):
    """A BRSD config whose thresholds sit at the median PRM score of the int8 draft's steps (the ci PRM barely
    separates steps: this makes accepts, rejects and backtracks all happen), and the checkpoints."""
    _, paths, export, *_ = kernel
    checkpoints = {r: read_manifest(paths.model_manifest(r))["path"] for r in ROLES}
    checkpoints["draft"] = str(export)
    cfg = compose_config(BRSD)
    problems = load_problems(cfg.dataset, 4)
    with Session(cfg, checkpoints, processes=False) as s:
        scores = sorted(c["prm_score"] for p in problems for c in s.run(p, cfg.algorithm, "sequential")["calls"]
                        if c["role"] == "prm")
    median = scores[len(scores) // 2]
    overrides = BRSD + [f"algorithm.threshold={median}", f"algorithm.backtrack_threshold={median}"]
    return compose_config(overrides), checkpoints, problems, overrides


def _view(r: dict) -> tuple:
    p = r["problems"][0]
    return (p["output"], p["prediction"], p["correct"], p["stop"], p["steps"], p["backtracks"], p["target_steps"],
            [(c["role"], c["step"], c["attempt"], c["phase"], c["tokens_out"], c["prm_score"], c["outcome"])
             for c in r["calls"] if c["role"] != "draft" or c["phase"] == "decode"])


def test_brsd_with_the_kernel_draft_equals_the_int8_reference(kernel, brsd):
    _, _, _, src, lib = kernel
    cfg, checkpoints, problems, _ = brsd
    recipe = KernelRecipe(str(lib), str(src), "u280")
    with Session(cfg, checkpoints, processes=False) as s:
        want = [s.run(p, cfg.algorithm, "sequential") for p in problems]
        want_ahead = [s.run(p, cfg.algorithm, "step_ahead") for p in problems[:2]]
    with Session(cfg, checkpoints, processes=False, decodings={"draft": recipe}) as s:
        assert isinstance(s.roles["draft"].role.decoding, KernelDecoding)
        seq = [s.run(p, cfg.algorithm, "sequential") for p in problems]
        ahead = [s.run(p, cfg.algorithm, "step_ahead") for p in problems[:2]]
    assert sum(r["problems"][0]["backtracks"] for r in want) > 0          # the backtrack branch ran
    assert [_view(r) for r in seq] == [_view(r) for r in want]
    kv = lambda r: [(x["mode"], x["valid"], x["current"], x["step_ahead"], x["reason"]) for x in r["kvmu"]]  # noqa
    assert [kv(r) for r in seq] == [kv(r) for r in want]
    # overlapped (steps drafted ahead, accepted and dropped; target rewrites drafted after before their verdict):
    # the same reasoning, the same pointer log, and no token processed that the int8 reference does not process
    assert [_view(r)[:7] for r in ahead] == [_view(r)[:7] for r in want_ahead] == [_view(r)[:7] for r in want[:2]]
    pairs = {(a[0], a[-1], b[-1]) for r in want_ahead for a, b in zip(kv(r), kv(r)[1:])}
    assert (ACCEPT, "prm", "step_ahead") in pairs                  # a step drafted ahead went to the PRM
    assert {(INIT, "reject", "step_ahead"), (INIT, "host", "step_ahead")} & pairs   # ahead of a rewrite's verdict
    assert [kv(r) for r in ahead] == [kv(r) for r in want_ahead]
    processed = lambda rs: sum(r["problems"][0]["draft_processed"] for r in rs)   # noqa: E731
    assert processed(ahead) == processed(want_ahead)


def test_collect_with_a_board_as_the_draft_runs_its_kernel_in_worker_processes(kernel, brsd):
    """collect.draft=u280: the collect stage builds the recipe, the draft's worker process loads the
    library; the shard's problems and KVMU tables equal those of the torch int8 draft in-process."""
    from heterospec.collect import run_shard
    from heterospec.reasoning.collect_schemas import COLLECT_TABLES
    from heterospec.store import read_parquet
    _, paths, *_ = kernel
    ov = brsd[3] + ["collect.limit=3"]

    def shard(extra: list[str], processes: bool) -> dict[str, list[dict]]:
        out = run_shard(compose_config(ov + extra), paths, ov + extra, "synthetic", "brsd", "sequential", "0of1",
                        processes=processes)
        return {t: read_parquet(out[t], COLLECT_TABLES[t]).to_pylist() for t in ("problems", "kvmu", "calls")}

    want = shard([], False)
    got = shard(["collect.draft=u280"], True)
    keys = ("problem_id", "prediction", "correct", "output", "stop", "steps", "draft_steps", "target_steps",
            "backtracks", "draft_tokens", "target_tokens", "prm_calls", "draft_ingested")
    view = lambda rows: [{k: r[k] for k in keys} for r in rows]           # noqa: E731
    assert len(got["problems"]) == 3 and view(got["problems"]) == view(want["problems"])
    kv = lambda rows: [{k: v for k, v in r.items() if k not in ("t_ns", "run")} for r in rows]   # noqa: E731
    assert kv(got["kvmu"]) == kv(want["kvmu"]) and len(got["kvmu"]) > 10
    # each draft call says how it was computed and, for the kernel, its modelled board time (the int8 reference has
    # none); the PRM and target are the same torch models in both runs
    impl = lambda rows, role: {r["impl"] for r in rows if r["role"] == role}                 # noqa: E731
    assert impl(got["calls"], "draft") == {"kernel:u280"} and impl(want["calls"], "draft") == {"w8a8"}
    assert impl(got["calls"], "target") == impl(want["calls"], "target") == {"float32"}
    board = [r["modelled_ms"] for r in got["calls"] if r["role"] == "draft"]
    assert all(b is not None and b >= 0 for b in board) and sum(board) > 0
    assert all(r["modelled_ms"] is None for r in want["calls"] + got["calls"] if r["role"] != "draft")
    assert all(r["modelled_ms"] is None for r in want["calls"])
    # the kernel drafted, writing a token only where the torch draft feeds one, but for the last token of a step it
    # hands the PRM (written at once, to mark the step's end): at most one more per proposal
    extra = sum(r["draft_processed"] for r in got["problems"]) - sum(r["draft_processed"] for r in want["problems"])
    proposals = sum(r["role"] == "draft" and r["phase"] == "decode" for r in got["calls"])
    assert 0 < extra <= proposals
    # a kernel generated anew (another template, other weights: another sha1) is not resumed from the journal
    from heterospec.collect import _journal_spec
    cfg = compose_config(ov + ["collect.draft=u280"])
    spec = lambda: _journal_spec(cfg, cfg.algorithm, paths, "synthetic", "sequential", "0of1")   # noqa: E731
    manifest = paths.hls_codegen("u280")
    before, text = spec(), manifest.read_text()
    try:
        manifest.write_text(json.dumps({**json.loads(text), "sha1": "0" * 16}))
        assert spec() != before
    finally:
        manifest.write_text(text)
    assert spec() == before


def test_one_line_errors(kernel, tmp_path):
    from heterospec.hls.kernel_draft import kernel_recipe
    cfg, paths, export, src, lib = kernel
    with pytest.raises(UserError, match="collect.draft=zz: expected model, w8a8 or one of hls.boards"):
        kernel_recipe(cfg, paths, "zz")
    elsewhere = SimpleNamespace(quantized_draft=paths.quantized_draft, hls_codegen=lambda b: tmp_path / b / "kernel.json")
    with pytest.raises(UserError, match="collect.draft=u280: no generated kernel at .*hls codegen --board u280"):
        kernel_recipe(cfg, elsewhere, "u280")
    with pytest.raises(UserError, match="C\\+\\+ compiler 'no-such-g\\+\\+' not found.*install g\\+\\+"):
        build_library(src, tmp_path / "lib", cxx="no-such-g++")
    other = tmp_path / "other_export"
    shutil.copytree(export, other)
    man = json.loads((other / "quantized.json").read_text())
    (other / "quantized.json").write_text(json.dumps({**man, "alpha": 0.25}))     # another quantisation
    recipe = KernelRecipe(str(lib), str(src), "u280")
    assert pickle.loads(pickle.dumps(recipe)) == recipe                         # a worker process can build it
    with pytest.raises(UserError, match="another model or quantisation; regenerate it") as e:
        recipe.build(RoleSpec(role="draft", path=str(other), device="cpu"))
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="algorithm.temperature=0.7: the kernel draft samples greedily"):
        recipe.build(RoleSpec(role="draft", path=str(export), device="cpu", temperature=0.7))
    dec = recipe.build(RoleSpec(role="draft", path=str(export), device="cpu"))
    cap = dec.k.shape.capacity
    with pytest.raises(UserError, match=f"longer than the kernel's KV capacity of {cap} \\(CAPACITY"):
        dec.start([1] * (cap + 1))


def test_the_kernel_draft_adds_up_the_perf_models_time_per_call(kernel):
    """Each kernel call that writes KV slot L costs the board the perf model's ms per token at context L."""
    from heterospec.config.hardware import device
    from heterospec.hls.kernel_draft import kernel_recipe
    from heterospec.hls.perf import Arch, Design, token_ms
    cfg, paths, export, src, _ = kernel
    _, recipe = kernel_recipe(cfg, paths, "u280")
    dec = recipe.build(RoleSpec(role="draft", path=str(export), device="cpu"))
    man = json.loads((src / "kernel.json").read_text())
    dev = device("u280", cfg)
    arch, design = Arch.of(man["arch"]), Design.of(dict(cfg.hls.pipeline))
    per = [token_ms(arch, man["rows"], man["cols"], dev, dev.clock_mhz, design, L)[0] for L in range(7)]
    dec.reset(0)
    dec.start([5, 6, 7, 8, 9])                                   # five host tokens: slots 0..4
    assert dec.modelled_ms == pytest.approx(sum(per[:5]))
    dec.next(10)
    dec.keep(1, False)                                           # one sampled token written at slot 5
    assert dec.modelled_ms == pytest.approx(sum(per[:6])) and per[5] > per[0] > 0


def test_the_library_is_built_once_per_digest_of_its_sources(kernel, tmp_path, capsys):
    """`python -m heterospec.hls lib` builds it beside its record (the hls_lib rule's output, naming it); the same
    sources give the same file (not rebuilt), a changed constant another."""
    cfg, _, _, src, _ = kernel
    own = tmp_path / "src"
    shutil.copytree(src, own)
    record = tmp_path / "lib" / "library.json"
    hls.main(["lib", "--board", "u280", "--kernel", str(own / "kernel.json"), "--out", str(record), "experiment=ci"])
    lib = build_library(own, tmp_path / "lib")
    assert f"kernel library {lib}" in capsys.readouterr().out
    assert json.loads(record.read_text())["library"] == lib.name
    record.unlink()
    built = lib.stat().st_mtime_ns
    assert build_library(own, tmp_path / "lib") == lib and lib.stat().st_mtime_ns == built
    (own / "draft_config.h").write_text((own / "draft_config.h").read_text() + "// another design point\n")
    other = build_library(own, tmp_path / "lib")
    assert other != lib and other.is_file() and sorted(p.name for p in (tmp_path / "lib").iterdir()) == \
        sorted([lib.name, other.name])


def test_the_batch_library_runs_passes_that_equal_the_batch_one_library_per_slot(kernel):
    """The host library of the batch-4 kernel: four sequences, one joining slot 1 again after the first left it,
    a rollback in one slot while the others speculate; every slot's outputs and registers after each pass equal the
    batch-1 library running that sequence alone, each writing pass streams the weights once, a bad slot is one
    line."""
    from heterospec.hls.csim import weight_words
    from heterospec.hls.kernel_lib import BatchKernel, build_batch_library
    from heterospec.hls.kvmu import ACCEPT as K_ACCEPT, INIT as K_INIT, ROLLBACK as K_ROLLBACK, SPEC as K_SPEC
    _, _, _, src, lib = kernel
    man = json.loads((src / "kernel.json").read_text())
    batch = BatchKernel(build_batch_library(src, 4), src)
    assert batch.batch == 4
    prompts = [[5, 9, 13], [7, 8], [21, 3, 4, 40, 2], [11]]
    seqs = [[(K_INIT, 0, 0, 0, t) for t in p] + [(K_SPEC, 0, 0, 0, 0)] * (3 + i) for i, p in enumerate(prompts)]
    seqs[2] += [(K_SPEC, 1, 0, 0, 0), (K_ACCEPT, 0, 0, 0, 0), (K_SPEC, 0, 0, 0, 0), (K_ROLLBACK, 0, 0, 0, 0),
                (K_SPEC, 0, 0, 0, 0)]
    seqs.append([(K_INIT, 0, 0, 0, 17), (K_SPEC, 0, 0, 0, 0), (K_SPEC, 0, 0, 0, 0)])   # joins slot 1 after seq 1
    slots = {0: 0, 1: 1, 2: 2, 3: 3}                       # slot -> sequence
    nxt, got = [0] * len(seqs), {s: [] for s in range(len(seqs))}
    for s in slots:
        batch.join(s)
    writing = 0
    while slots:
        out = batch.run_pass({b: seqs[s][nxt[s]] for b, s in slots.items()})
        writing += any(o["wr_en"] for o in out.values())
        for b, o in out.items():
            s = slots[b]
            got[s].append(o)
            nxt[s] += 1
            if nxt[s] == len(seqs[s]):
                del slots[b]
                if s == 1:
                    batch.join(1)
                    slots[1] = 4
    for s, cmds in enumerate(seqs):
        alone = KernelInstance(lib, src)
        alone.reset()
        assert got[s] == [alone.step(*c) for c in cmds], s
    assert batch.passes == writing and batch.weight_words == writing * weight_words(man["arch"], man["port_bits"])
    with pytest.raises(UserError, match="slots 0 to 3"):
        batch.run_pass({4: (K_SPEC, 0, 0, 0, 0)})
    with pytest.raises(UserError, match="slot 9"):
        batch.join(9)


def test_a_request_beyond_the_kernel_drafts_slots_is_one_line(kernel):
    from heterospec.hls.kernel_lib import BatchKernel, build_batch_library
    from heterospec.hls.kernel_serving import KernelBatchWriter
    _, _, _, src, _ = kernel
    lane = KernelBatchWriter(BatchKernel(build_batch_library(src, 2), src),
                             lambda slot: SimpleNamespace(reset=lambda seed: None), 2)
    lane.open(0, 0)
    lane.open(1, 0)
    with pytest.raises(UserError, match=r"2 slots .* serving.requests.*request 2 finds none"):
        lane.open(2, 0)
