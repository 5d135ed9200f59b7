"""Printed tables of the HLS models: ms/token beside the roofline, where the gap goes, resources per board."""
from __future__ import annotations

PAPER_U280_MS = 5.74   # HeteroReason: measured draft decode, Qwen2.5-0.5B W8A8 on U280 at 200 MHz (alpha_d)


def print_perf(perf: list[dict], context: int | None = None) -> None:
    """ms/token per board x clock x model at one context (default: the smallest), with the roofline."""
    ctx = min(r["context_len"] for r in perf) if context is None else context
    rows = [r for r in perf if r["context_len"] == ctx]
    print(f"draft decode latency at context {ctx} (streaming W8A8 pipeline vs HBM roofline)")
    print(f"  {'board':6} {'MHz':>5} {'model':24} {'engine':>7} {'ms/token':>9} {'roofline':>9} {'of BW':>6} "
          f"{'tok/s':>7} closes")
    for r in sorted(rows, key=lambda r: (r["model"], r["board"], r["clock_mhz"])):
        print(f"  {r['board']:6} {r['clock_mhz']:5.0f} {r['model'][:24]:24} {r['rows']:>3}x{r['cols']:<3} "
              f"{r['ms_per_token']:9.3f} {r['roofline_ms']:9.4f} {100 * r['roofline_ms'] / r['ms_per_token']:5.1f}% "
              f"{1e3 / r['ms_per_token']:7.1f} {'yes' if r.get('closes', True) else 'no'}")
    ref = [r for r in rows if r["board"] == "u280" and r["clock_mhz"] == 200 and "0.5B" in r["model"]
           and r.get("design") == "serial_u280"]                       # the paper's point is the serial design
    for r in ref:
        print(f"  paper's design point (U280, 200 MHz, {r['model']}): measured {PAPER_U280_MS} ms/token; "
              f"model {r['ms_per_token']:.3f} ({100 * (r['ms_per_token'] / PAPER_U280_MS - 1):+.1f} %)")


def print_breakdown(breakdown: list[dict], board: str, clock: float, model: str, context: int,
                    roofline_ms: float) -> None:
    """Where one configuration's time goes, from the roofline up."""
    rows = [r for r in breakdown if r["board"] == board and r["clock_mhz"] == clock and r["model"] == model
            and r["context_len"] == context]
    if not rows:
        return
    total = sum(r["ms"] for r in rows)
    print(f"where the time goes: {model} on {board} at {clock:.0f} MHz, context {context} "
          f"({total:.3f} ms/token; roofline {roofline_ms:.3f})")
    for r in rows:
        print(f"  {r['component']:15} {r['cycles']:12,.0f} cycles {r['ms']:8.3f} ms {100 * r['ms'] / total:5.1f} %")


def print_resources(res: list[dict]) -> None:
    """DSP / LUT / FF / BRAM36 / URAM per board and model, for the device and per SLR, with the timing verdicts."""
    print("resources (estimated: per-unit costs and stated placement, not synthesis; utilisation of what the shell leaves)")
    for r in res:
        util = "  ".join(f"{k} {r[k]:,} ({100 * r[k + '_util']:.1f} %)" if r.get(k + "_util") is not None
                         else f"{k} {r[k]:,} (total unknown)" for k in ("dsp", "lut", "ff", "bram36", "uram"))
        if r["slr"] == "device":
            verdict = "fits" if r["fits"] else "DOES NOT FIT"
            if r["unchecked"]:
                verdict += f" (unchecked: {r['unchecked']})"
            print(f"  {r['board']:5} {r['model'][:24]:24} {r.get('design', '')} {r['rows']}x{r['cols']}: {util}  -> {verdict}")
            if r.get("timing"):
                print(f"        timing: {r['timing']}")
        else:
            sll = f"  SLL to next {r['sll']:,} ({100 * r['sll_util']:.1f} %)" if r.get("sll_util") is not None else ""
            print(f"        {r['slr']}: {util}{sll}")
