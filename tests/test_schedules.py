"""Schedules compose (issue 11, deliverable 5): a mechanism is one module, a mix is one YAML file, and every key of a
schedule changes results or is refused."""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import heterospec.config
import heterospec.replay.schedules as schedules
import heterospec.replay.schedules.mechanisms as mechanisms
from heterospec.config import CONF_DIR, compose_config
from heterospec.config.hardware import System
from heterospec.errors import UserError
from heterospec.replay.simulator.des import simulate_problem
from heterospec.replay.simulator.problem import TracedProblem
from heterospec.replay.profiles.registry import get_profile
from heterospec.replay.schedules import Schedule, get_schedule, schedule_names
from heterospec.replay.simulator.system import Ctx, SystemParams, SpeculationParams

SYNC_PENALTY = '''"""A test mechanism: the draft's ingest of a target step takes ``sync_penalty_ms`` longer."""
from heterospec.replay.schedules.mechanisms import mechanism
from heterospec.replay.schedules.pipeline import Pipeline


@mechanism("sync_penalty", options={"sync_penalty_ms": 50.0})
class SyncPenalty(Pipeline):
    def ingest_ms(self, i):
        return super().ingest_ms(i) + self.options["sync_penalty_ms"]
'''


@pytest.fixture(scope="module")
def u280():
    return System.of(compose_config(["system=hetero_u280"]).system)


def ctx(system, recorded=None) -> Ctx:
    return Ctx(get_profile("paper_v12", system=system), SystemParams.of(system), recorded,
               SpeculationParams(tau=3.0, draft_len=5))


def roofline_ctx(system) -> Ctx:
    """Datasheet prices with prefix caches: every operation costs something (the paper profiles price the draft's
    ingest of a target step at 0, so shadow synchronisation cannot show there)."""
    prof = get_profile("roofline", system=system, models=compose_config([]).models, checkpoints=None)
    return Ctx(prof, SystemParams.of(system), speculation=SpeculationParams(tau=3.0, draft_len=5))


def problems() -> list[TracedProblem]:
    """A prompt, accepts, rescues (one rejected, as BRSD records it) and a backtrack to an earlier step."""
    def prob(name, outs, d, t, kvv, kvt, r=None):
        path, kv = [], 0
        for o, dd, tt, k in zip(outs, d, t, kvt):
            kv = k + (dd if o == "accept" else tt)
            path.append(kv)
        return TracedProblem("s", name, 1500, outs, d, t, kvv, kvt, path, rescue_tokens=r)
    return [prob("rescue", ["accept", "rescue", "accept", "accept"], [40, 30, 50, 20], [0, 60, 0, 0],
                 [0, 40, 100, 150], [0, 40, 100, 150]),
            # a long target step: on the U280 the draft's ingest of it outlasts the PRM's score (roofline)
            prob("long rescue", ["accept", "rescue", "accept"], [40, 30, 50], [0, 1500, 0], [0, 40, 1540],
                 [0, 40, 1540]),
            prob("backtrack", ["accept", "accept", "backtrack", "accept", "rescue", "accept"],
                 [40, 30, 50, 20, 25, 30], [0, 0, 70, 0, 45, 0], [0, 40, 70, 110, 130, 175],
                 [0, 40, 40, 110, 130, 175], r=[0, 0, 35, 0, 0, 0])]


def latencies(sched, c: Ctx) -> list[float]:
    return [simulate_problem(p, sched, c)[0]["latency_ms"] for p in problems()]


@pytest.fixture
def new_mechanism(tmp_path, monkeypatch):
    """The mechanism above as a module next to the shipped ones (the package's search path extended, so the source
    tree is untouched), and a copy of conf/ with a new schedule file that turns it on. Nothing else is edited."""
    mechanisms.registered()   # the shipped ones, before the registry is swapped for a copy
    pkg = tmp_path / "mechanisms"
    pkg.mkdir()
    (pkg / "sync_penalty.py").write_text(SYNC_PENALTY)
    monkeypatch.setattr(mechanisms, "__path__", [*mechanisms.__path__, str(pkg)])
    monkeypatch.setattr(mechanisms, "_REGISTRY", dict(mechanisms._REGISTRY))
    monkeypatch.setattr(mechanisms, "_loaded", False)
    monkeypatch.setattr(schedules, "_CACHE", {})
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    hetero = (conf / "schedule" / "hetero.yaml").read_text().replace("name: hetero", "name: hetero_penalty")
    (conf / "schedule" / "hetero_penalty.yaml").write_text(hetero + "sync_penalty: true\nsync_penalty_ms: 50.0\n")
    monkeypatch.setattr(heterospec.config, "CONF_DIR", conf)
    yield
    import sys
    sys.modules.pop(f"{mechanisms.__name__}.sync_penalty", None)


def test_a_new_mechanism_is_one_module_and_a_new_mix_one_yaml_file(new_mechanism, u280):
    assert "hetero_penalty" in schedule_names()
    c = ctx(u280)
    base = latencies("hetero", c)
    syncs = [1, 1, 2]   # rejected steps before the last, each followed by the draft's ingest on the critical path

    def shifts(sched):   # minus what the ingest overlapped: the link's 1 µs hop after the target's step
        return [round(a - b, 2) for a, b in zip(latencies(sched, c), base)]
    # by name, and through the Hydra group with an override of the new mechanism's own option
    assert shifts("hetero_penalty") == [50.0 * k for k in syncs]
    assert shifts(compose_config(["schedule=hetero_penalty", "schedule.sync_penalty_ms=80"]).schedule) == \
        [80.0 * k for k in syncs]
    # the option of a mechanism that is off would change nothing: refused
    with pytest.raises(UserError, match="sync_penalty_ms is 80 but sync_penalty is off"):
        get_schedule(compose_config(["schedule=hetero_penalty", "schedule.sync_penalty=false",
                                     "schedule.sync_penalty_ms=80"]).schedule)


@pytest.mark.parametrize("name", ["sequential", "step_ahead", "prefetch_only", "hetero", "hetero_sd", "target_sd"])
def test_every_key_changes_results_or_is_refused(name, u280):
    """Flip each mechanism of a shipped schedule (the roofline profile simulates every prefetch): the latencies
    change, or the flip is refused because another mechanism needs it."""
    base = OmegaConf.load(CONF_DIR / "schedule" / f"{name}.yaml")
    c = roofline_ctx(u280)
    before = latencies(base, c)
    for mech in sorted(mechanisms.registered()):
        flipped = OmegaConf.merge(base, {mech: not base.get(mech, False)})
        try:
            after = latencies(flipped, c)
        except UserError as e:
            assert "needs" in str(e) or "is off" in str(e) or "would change nothing" in str(e), str(e)
            continue
        assert after != before, f"{name} with {mech} flipped: the same latencies"
    if base.get("draft_pipeline", False):   # short drafts (the PRM the bottleneck) before a long one: a deeper look-ahead starts it
        d = [5, 5, 5, 5, 100, 5]                 # earlier
        kv = [1000 + sum(d[:j]) for j in range(6)]
        prob = TracedProblem("s", "p", 0, ["accept"] * 6, d, [0] * 6, kv, kv, [k + n for k, n in zip(kv, d)])
        lat = [simulate_problem(prob, OmegaConf.merge(base, {"draft_lookahead": k}), ctx(u280))[0]["latency_ms"]
               for k in (1, 3)]
        assert lat[1] < lat[0] - 100
    elif not base.get("target_alone", False):
        with pytest.raises(UserError, match="draft_lookahead is 3 but draft_pipeline is off"):
            get_schedule(OmegaConf.merge(base, {"draft_lookahead": 3}))


def test_bad_schedule_files_are_one_line_errors():
    with pytest.raises(UserError, match="unknown key 'lookahead'; mechanisms: .*draft_pipeline"):
        Schedule.from_config({"name": "x", "lookahead": 2})
    with pytest.raises(UserError, match="partial_cache needs prefetch"):
        Schedule.from_config({"name": "x", "partial_cache": True})
    with pytest.raises(UserError, match="prefetch is 'yes', expected true or false"):
        Schedule.from_config({"name": "x", "prefetch": "yes"})
    with pytest.raises(UserError, match="draft_lookahead is 0, expected 1 or more"):
        Schedule.from_config({"name": "x", "draft_pipeline": True, "draft_lookahead": 0})
    with pytest.raises(UserError, match="Key 'lookahead' is not in struct"):
        compose_config(["schedule=hetero", "schedule.lookahead=2"])
    with pytest.raises(UserError, match="unknown key 'lookahead'"):
        get_schedule(compose_config(["schedule=hetero", "+schedule.lookahead=2"]).schedule)


def test_the_policy_modules_import_leaves_not_the_package():
    """No import circle: the package's modules import the leaves (caches, pipeline, the registry), never the
    package's own __init__ (which builds schedules from them)."""
    root = Path(schedules.__file__).parent
    for path in root.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "heterospec.replay.schedules", f"{path.name} imports the schedules package"


def test_an_edited_schedule_file_reruns_the_replays_that_read_it(tmp_path, monkeypatch):
    """The rules' digests (Snakemake params) read the schedule files themselves: an edit to one that a replay
    runs moves its digest; an edit to one no replay runs moves none."""
    from heterospec.config.digest import ResolvedRun
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    monkeypatch.setattr(heterospec.config, "CONF_DIR", conf)
    ov = ["experiment=default"]
    rules = ("replay", "replay_validate", "report_ours")

    def digests():
        run = ResolvedRun(compose_config(ov), ov)
        return {r: run.spec(r, {}) for r in rules}

    before = digests()
    cfg = compose_config(ov)
    assert "hetero" in cfg.replay.schedules and "hetero" not in cfg.replay.validate_schedules
    assert "prefetch_only" not in [*cfg.replay.schedules, *cfg.replay.validate_schedules, cfg.schedule.name]
    def edit(name, old, new):
        path = conf / "schedule" / f"{name}.yaml"
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new))

    edit("prefetch_only", "shadow_sync: false", "shadow_sync: true")
    assert digests() == before
    edit("hetero", "draft_lookahead: 1", "draft_lookahead: 2")
    after = digests()
    assert after["replay"] != before["replay"] and after["report_ours"] != before["report_ours"]
    assert after["replay_validate"] == before["replay_validate"]
    edit("step_ahead", "shadow_sync: false", "shadow_sync: true")
    assert digests()["replay_validate"] != before["replay_validate"]
