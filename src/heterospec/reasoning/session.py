"""A collect session: the three devices, started once, running problem after problem."""
from __future__ import annotations

import os
import time

from heterospec.config.collect_variants import draft_implementation
from heterospec.errors import UserError
from heterospec.grading import grade, last_boxed
from heterospec.reasoning.controller import solve
from heterospec.reasoning.executors import Sequential, StepAhead
from heterospec.reasoning.workers import LocalRole, ProcessRole, RoleSpec

EXECUTORS = ("sequential", "step_ahead")


def cpu_placement(devices: dict[str, str]) -> dict[str, tuple[tuple[int, ...], int]]:
    """(cores, nice) per role when the roles share this machine's CPU instead of owning a device each.

    Each role gets a core of its own while there are three; on two cores the target shares the PRM's
    core at a lower priority, so its speculative prefetch uses what the PRM leaves and never slows the
    draft (as it could not on a GPU of its own). A sequential run is unaffected: one role works at a time.
    """
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    on_cpu = [r for r in ("draft", "prm", "target") if devices[r] == "cpu"]
    if len(cores) < 2 or len(on_cpu) < 3:
        return {r: ((), 0) for r in devices}
    if len(cores) >= 3:
        return {"draft": ((cores[0],), 0), "prm": ((cores[1],), 0), "target": ((cores[2],), 0)}
    return {"draft": ((cores[0],), 0), "prm": ((cores[1],), 0), "target": ((cores[1],), 10)}


def implementations(cfg, alg, decodings: dict | None) -> dict[str, str]:
    """How each role computes, for the traces: its torch dtype, ``w8a8`` for the int8 reference draft,
    ``kernel:<board>`` for the generated kernel; ``+<strategy>`` when the target speculates."""
    m = cfg.models
    out = {r: str(m[r].dtype) for r in ("draft", "prm", "target")}
    if draft_implementation(cfg) == "w8a8":
        out["draft"] = "w8a8"
    recipe = (decodings or {}).get("draft")
    if recipe is not None:
        out["draft"] = f"{recipe.kind}:{getattr(recipe, 'board', '')}".rstrip(":")
    if alg.target_decoding != "plain":
        out["target"] += f"+{alg.target_decoding}"
    return out


def trace_rows(problem, out, rec, prompt_tokens: int, latency: float, stats: dict) -> dict[str, list[dict]]:
    """One solved problem's rows for the calls, steps, problems, kvmu and rounds tables (run fields not filled), from
    the controller's outcome, the executor's recorder and the draft's counters and KVMU log (``stats``)."""
    text = "".join(n.step.text for n in out.path)
    calls = rec.rows

    def gen(role: str) -> int:
        return sum(r["tokens_out"] for r in calls if r["role"] == role)

    problem_row = dict(
        problem_id=problem.id, answer=problem.answer, prediction=last_boxed(text),
        correct=grade(text, problem.answer), output=text, stop=out.stop, steps=len(out.path),
        draft_steps=sum(n.author == "draft" for n in out.path),
        target_steps=sum(n.author == "target" for n in out.path), backtracks=out.backtracks,
        draft_tokens=gen("draft"), target_tokens=gen("target"),
        prm_calls=sum(r["role"] == "prm" for r in calls), prompt_tokens=prompt_tokens,
        draft_processed=stats["processed"], draft_ingested=stats["ingested"], latency_s=latency)
    kvmu = [dict(problem_id=problem.id, seq=i, t_ns=t - rec.t0, mode=mode, valid=v, current=c, step_ahead=s,
                 reason=why) for i, (t, mode, v, c, s, why) in enumerate(stats["kvmu"])]
    return {"calls": [dict(problem_id=problem.id, **r) for r in calls],
            "steps": [dict(problem_id=problem.id, **r) for r in rec.steps], "problems": [problem_row], "kvmu": kvmu,
            "rounds": [dict(problem_id=problem.id, **r) for r in rec.round_rows()]}


class Session:
    """Draft, PRM and target, each on the device ``system.torch_devices`` names; the target writes plainly or, with
    ``algorithm.target_decoding`` a strategy, by token-level speculation with a copy of the run's draft beside it."""

    def __init__(self, cfg, checkpoints: dict[str, str], processes: bool = True, threads: int = 1, alg=None,
                 speculative_draft: str | None = None, decodings: dict | None = None, serving: dict | None = None):
        """``alg``: the algorithm run (default ``cfg.algorithm``); ``speculative_draft``: the float draft checkpoint
        the target speculates with (default ``checkpoints["draft"]``; the run's draft may be a W8A8 export);
        ``decodings``: per role, a :class:`~heterospec.models.decoding.DecodingRecipe` the stage built (the kernel
        draft); a role without one decodes plainly (the target: or speculatively, as the algorithm says);
        ``serving``: per role, the most requests in one pass, for a serving run's workers
        (:mod:`heterospec.reasoning.serving`)."""
        from heterospec.models.loading import load_tokenizer
        from heterospec.speculative.stepwise import speculative_recipe

        self.cfg = cfg
        alg = alg if alg is not None else cfg.algorithm
        self.devices = {r: str(cfg.system.torch_devices[r]) for r in ("draft", "prm", "target")}
        self.tokenizer = load_tokenizer(checkpoints["draft"], "draft")
        target_tok = load_tokenizer(checkpoints["target"], "target")
        if self.tokenizer.get_vocab() != target_tok.get_vocab():
            raise UserError(f"models.draft and models.target use different tokenizers "
                            f"({checkpoints['draft']} vs {checkpoints['target']}); speculation needs one vocabulary")
        target_decoding = None
        if alg.target_decoding != "plain":
            target_decoding = speculative_recipe(cfg, str(alg.target_decoding), "algorithm.target_decoding",
                                                 speculative_draft or checkpoints["draft"], checkpoints["target"])
        self.impls = implementations(cfg, alg, decodings)
        Role = ProcessRole if processes else LocalRole
        m = cfg.models
        self.roles = {}
        placement = cpu_placement(self.devices) if processes else {r: ((), 0) for r in self.devices}
        try:
            for r in ("draft", "prm", "target"):
                self.roles[r] = Role(RoleSpec(role=r, path=checkpoints[r], device=self.devices[r],
                                              dtype=m[r].dtype, threads=threads, prompt=m.prompt,
                                              delimiter=m.step_separator, step_token=m.prm_step_token,
                                              temperature=alg.temperature,
                                              quantized=r == "draft" and draft_implementation(cfg) == "w8a8",
                                              cpus=placement[r][0], nice=placement[r][1],
                                              serving=(serving or {}).get(r, 0),
                                              decoding=(decodings or {}).get(r) or
                                              (target_decoding if r == "target" else None)))
            for role in self.roles.values():      # started side by side; a worker that fails to load says so here
                role.ready()
        except BaseException:
            self.close()
            raise

    def executor(self, name: str, alg):
        args = (self.roles["draft"], self.roles["prm"], self.roles["target"], alg.max_tokens_per_call, self.devices,
                self.impls)
        if name == "sequential":
            return Sequential(*args)
        if name == "step_ahead":
            return StepAhead(*args, plain_prefetch=alg.target_decoding != "plain" and not alg.speculative_prefetch)
        raise UserError(f"executor '{name}': expected one of {list(EXECUTORS)}")

    def prompt_ids(self, question: str) -> list[int]:
        from heterospec.models.prompts import format_prompt
        text = format_prompt(self.cfg.models.prompt, question, self.tokenizer)
        return self.tokenizer(text)["input_ids"]  # with the special tokens the models were trained with (bos)

    def run(self, problem, alg, executor: str, ex=None) -> dict[str, list[dict]]:
        """Solve one problem; its rows for the calls, steps, problems, kvmu and rounds tables (run fields not
        filled)."""
        ex = ex or self.executor(executor, alg)
        prompt = self.prompt_ids(problem.question)
        t0 = time.perf_counter()
        ex.begin(problem.question, prompt, alg.seed)
        out = solve(ex, alg)
        ex.finish()
        latency = time.perf_counter() - t0
        return trace_rows(problem, out, ex.rec, len(prompt), latency, self.roles["draft"].call("stats"))

    def close(self) -> None:
        for role in self.roles.values():
            role.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
