"""Typed plans: below a stage's entry the code reads a plan resolved once from the config, not the config itself.
Today the load stage (heterospec.replay.load.stage: ``LoadPlan``); the functions still taking the raw config are
listed, so the list can only shrink. Read from the source with ``ast``."""
from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# module -> the functions that may take the composed config (its entry points and the plan's builders)
TAKES_CONFIG = {
    "heterospec/replay/load/stage.py": {"load_plan", "run_stage", "point_stage", "make_jobs", "device_plan",
                                        "pricing_inputs", "trace_sets", "which_traces"},
}
CAST = re.compile(r"\b(int|float)\(cfg\.")


def config_takers(path: Path) -> set[str]:
    """Functions of ``path`` with a parameter named ``cfg``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            names = [a.arg for a in node.args.args + node.args.kwonlyargs]
            if "cfg" in names:
                out.add(getattr(node, "name", "<lambda>"))
    return out


def test_below_the_stage_entry_only_the_plan_is_read():
    for module, allowed in TAKES_CONFIG.items():
        extra = config_takers(SRC / module) - allowed
        assert not extra, f"{module}: {sorted(extra)} take the raw config; pass the stage's plan instead"


def test_no_casts_of_config_values_outside_the_plan_builders():
    for module in TAKES_CONFIG:
        casts = [f"{module}:{i}: {line.strip()}" for i, line in enumerate((SRC / module).read_text().splitlines(), 1)
                 if CAST.search(line)]
        assert not casts, "\n" + "\n".join(casts)


def test_a_function_taking_the_config_is_found(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def point_size(cfg, rate):\n    return int(cfg.load.requests)\n\ndef ok(plan):\n    return plan\n")
    assert config_takers(f) == {"point_size"}
    assert CAST.search(f.read_text())
