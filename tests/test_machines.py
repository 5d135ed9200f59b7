"""A run records the machine and the code each of its jobs ran on (heterospec.store.machines): the CPU's model, its
id and vector width, the logical and usable cores, and the checkout's commit; a stage's command writes its job's row
when it composes the run's config, a trained role keeps its row in its manifest, and the catalogue reads the rows
(the ``machines``, ``run_machines`` and ``run_commits`` views)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, heterospec, run_cmd
from heterospec.models.role_manifest import read_manifest, record_training_machine
from heterospec.paths import ROLES
from heterospec.store import read_parquet
from heterospec.store.catalog import build, query
from heterospec.store.machines import MACHINE_FIELDS, MACHINES_SCHEMA, code_commit, cpu_info, this_machine

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz
stepping\t: 7
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw

processor\t: 1
model name\t: another CPU
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes crc32
CPU implementer\t: 0x41
CPU part\t: 0xd0c
"""


def is_this_checkouts(commit, dirty) -> bool:
    """A full hash of a commit of this checkout (the code the tests run), whichever HEAD is now, and a dirty flag;
    both None where the tests run outside a git checkout."""
    if code_commit(ROOT) == (None, None):
        return commit is None and dirty is None
    return bool(re.fullmatch(r"[0-9a-f]{40}", commit or "")) and dirty in (True, False) and \
        subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                       env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")}).returncode == 0


def test_the_cpu_is_read_from_cpuinfo_with_a_fallback():
    assert cpu_info(X86) == {"cpu_model": "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz",
                             "cpu_id": "family 6 model 85 stepping 7", "vector_isa": "avx512"}
    assert cpu_info(X86.replace(" avx512f avx512bw", ""))["vector_isa"] == "avx2"
    arm = cpu_info(ARM)
    assert arm["cpu_id"] == "implementer 0x41 part 0xd0c" and arm["vector_isa"] == "neon" and arm["cpu_model"]
    empty = cpu_info("")    # no /proc/cpuinfo: the platform's name for the processor, nothing made up
    assert empty["cpu_model"] and empty["cpu_id"] is None and empty["vector_isa"] is None


def test_the_commit_is_the_checkouts_head_and_none_outside_git(tmp_path):
    assert code_commit(tmp_path) == (None, None)
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}   # this repo, also inside a git hook
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True, env=env)
    subprocess.run([*git, "commit", "-qm", "one"], check=True, env=env)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()
    (repo / "untracked.txt").write_text("not part of the tree\n")
    assert code_commit(repo) == (head, False)
    (repo / "a.txt").write_text("two\n")
    assert code_commit(repo) == (head, True)


def test_a_stage_command_records_its_job_and_the_catalogue_reads_it(tmp_path):
    # a stage's command (it stops after composing: no shards to merge) writes its job's row all the same
    r = run_cmd([sys.executable, "-m", "heterospec.collect", "merge", "--dataset", "synthetic", "--algorithm",
                 "brsd", "--executor", "sequential", "--shards", "1", "experiment=ci"], cwd=tmp_path)
    assert r.returncode == 2 and "file not found" in r.stderr, r.stderr
    assert heterospec("config", "experiment=ci", cwd=tmp_path).returncode == 0   # the heterospec command: no row
    files = sorted((tmp_path / "results").glob("*/machines/*.parquet"))
    assert [f.relative_to(tmp_path).parent.as_posix() for f in files] == ["results/ci/machines"], files
    row = read_parquet(files[0], MACHINES_SCHEMA).to_pylist()[0]
    assert row["run"] == "ci" and row["stage"] == "collect"
    assert row["job"] == "collect merge --dataset synthetic --algorithm brsd --executor sequential --shards 1"
    here = this_machine()
    for field in ("cpu_model", "cpu_id", "vector_isa", "logical_cores", "host", "arch", "torch"):
        assert row[field] == here[field], field
    assert row["cpu_model"] and row["logical_cores"] == os.cpu_count()
    assert row["usable_cores"] == len(os.sched_getaffinity(0))
    assert is_this_checkouts(row["commit"], row["dirty"])
    assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ", row["recorded_at"])

    db = tmp_path / "results" / "heterospec.duckdb"
    assert {"machines", "run_machines", "run_commits"} <= set(build(db, tmp_path))
    cols, rows = query(db, "SELECT * FROM machines")
    assert len(rows) == 1 and dict(zip(cols, rows[0])) == row
    cols, rows = query(db, "SELECT run, cpu_model, logical_cores, usable_cores, jobs, hosts, stages FROM run_machines")
    assert rows == [("ci", row["cpu_model"], row["logical_cores"], row["usable_cores"], 1, 1, "collect")]
    assert query(db, "SELECT run, commit, dirty, jobs FROM run_commits")[1] == [("ci", row["commit"], row["dirty"], 1)]


def test_a_trained_role_records_its_machine_in_its_manifest(trained_models, tmp_path):
    _, paths = trained_models.run(["experiment=ci"])
    manifests = {r: read_manifest(paths.model_manifest(r)) for r in ROLES}
    for role, m in manifests.items():
        assert set(m["machine"]) == set(MACHINE_FIELDS), role
        assert m["machine"]["cpu_model"] == this_machine()["cpu_model"] and m["machine"]["logical_cores"] >= 1
        assert is_this_checkouts(m["machine"]["commit"], m["machine"]["dirty"])
    # a run that reuses the trio (the quality report copies each role's row): the manifest's machine, and a role
    # trained before manifests recorded it is a row that says nothing rather than this machine's
    run_root = tmp_path / "results" / "reuser"
    for role, m in manifests.items():
        record_training_machine(run_root, "reuser", m if role != "prm" else
                                {k: v for k, v in m.items() if k != "machine"})
    rows = {Path(f).stem: read_parquet(f, MACHINES_SCHEMA).to_pylist()[0]
            for f in sorted((run_root / "machines").glob("*.parquet"))}
    assert sorted(rows) == ["models-train-draft", "models-train-prm", "models-train-target"]
    assert rows["models-train-draft"] == {"run": "reuser", "stage": "models", "job": "models train --role draft",
                                          **manifests["draft"]["machine"]}
    prm = rows["models-train-prm"]
    assert prm["job"] == "models train --role prm" and prm["recorded_at"] == manifests["prm"]["created"]
    assert all(prm[k] is None for k in MACHINE_FIELDS if k != "recorded_at")
