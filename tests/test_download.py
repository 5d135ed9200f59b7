"""The benchmark download: validated before it lands, one line when the network or the file is bad."""
from __future__ import annotations

import functools
import http.server
import sys
import threading

import pytest

from conftest import run_cmd
from heterospec.errors import UserError
from heterospec.tasks.download import download


@pytest.fixture
def server(tmp_path):
    """A loopback HTTP server over tmp_path."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_download_validates_then_lands(shared_datasets, tmp_path, server):
    (tmp_path / "gsm8k.jsonl").write_bytes((shared_datasets / "gsm8k" / "test.jsonl").read_bytes())
    out = tmp_path / "data" / "gsm8k" / "test.jsonl"
    assert download("gsm8k", f"{server}/gsm8k.jsonl", out) == 1319
    assert out.exists() and not list(out.parent.glob(".*"))


def test_bad_download_leaves_nothing(tmp_path, server):
    (tmp_path / "broken.jsonl").write_text('{"question": "q", "answer": "a #### 1"}\n{oops\n')
    out = tmp_path / "data" / "gsm8k" / "test.jsonl"
    with pytest.raises(UserError, match="broken.jsonl|:2: not valid JSON"):
        download("gsm8k", f"{server}/broken.jsonl", out)
    assert not out.exists() and not list(out.parent.glob(".*"))


def test_unreachable_host_is_one_line(tmp_path):
    out = tmp_path / "gsm8k" / "test.jsonl"
    r = run_cmd([sys.executable, "-m", "heterospec.tasks.download", "--dataset", "gsm8k", "--out", str(out),
                 "experiment=paper_config1", "dataset.url=http://127.0.0.1:9/gsm8k.jsonl"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "put the file at" in r.stderr
    assert not out.exists()
