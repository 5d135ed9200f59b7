"""The artifact's Figure 8 tables that shared files determine are regenerated within 1 % (docs/replay.md)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from heterospec.errors import UserError
from heterospec.replay.artifact import figure8

ARTIFACT = Path(__file__).resolve().parents[1].parent / "shared/heteroreason_ae"
pytestmark = pytest.mark.skipif(not (ARTIFACT / "figure8").is_dir(), reason=f"{ARTIFACT} absent (shared artifact)")


def test_figure8_tables_within_one_percent():
    errs = figure8.worst_errors(ARTIFACT)
    assert len(errs) == 3
    for table, (n, err) in errs.items():
        assert n >= 12 and err < 0.01, f"{table}: {100 * err:.3g} %"


def test_a_swapped_device_is_caught(tmp_path):
    """The V80 table's "ours" read as the U280's: the regenerated compare table no longer matches."""
    root = tmp_path / "ae"
    for rel in (figure8.COMPARE_CSV, figure8.REBUILT_CSV.format("u280"), figure8.V11_REFERENCE, figure8.FIGURE_METRICS):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ARTIFACT / rel, root / rel)
    (root / figure8.REBUILT_CSV.format("v80")).parent.mkdir(parents=True)
    shutil.copy(ARTIFACT / figure8.REBUILT_CSV.format("u280"), root / figure8.REBUILT_CSV.format("v80"))
    n, err = figure8.worst_errors(root)[figure8.COMPARE_CSV]
    assert err > 0.05


def test_missing_files_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit, match="figure8_projected_compare_normalized_metrics.csv: not found"):
        figure8.main(["--artifact", str(tmp_path)])
    with pytest.raises(UserError, match="not found"):
        figure8.published_ours(tmp_path)
