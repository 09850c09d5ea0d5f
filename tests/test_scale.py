"""Scale: streamed solves equal in-memory ones; sharded results equal single-device ones."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl.io import PageTable, write_page_table
from jaxcrawl.parallel import StreamedTable, page_mesh, shard_pages


def stream(table, bandwidth, objective="harmonic", **kwargs):
    """``jaxcrawl.solve`` of a StreamedTable: ``(policy, source)`` (the source counts the
    passes over the table)."""
    opts = {k: kwargs.pop(k) for k in ("bounds", "max_steps", "rtol") if k in kwargs}
    src = StreamedTable(table, bandwidth, **kwargs)
    return jaxcrawl.solve(src, objective, **opts), src


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A float64 page table (written once; its in-memory problem is built per test)."""
    with jax.enable_x64(True):
        p = jaxcrawl.synthetic(jax.random.key(3), 25_013, dtype=np.float64)
        arrays = [np.asarray(a) for a in (p.importance, p.change_rate, p.complete)]
    return arrays, write_page_table(str(tmp_path_factory.mktemp("table")), *arrays)


@pytest.mark.x64
@pytest.mark.parametrize("objective,epsilon", [("harmonic", 0.0), ("binary", 0.0), ("binary", 0.4)])
@pytest.mark.parametrize("chunk", [4096, 10_000, 1 << 20])
def test_stream_equals_in_memory(table, tmp_path, objective, epsilon, chunk):
    arrays, t = table
    p = jaxcrawl.CrawlProblem(*arrays[:2], 0.2 * len(arrays[0]), arrays[2])
    obj = jaxcrawl.harmonic() if objective == "harmonic" else jaxcrawl.binary(epsilon)
    res, src = stream(t, float(p.bandwidth), obj, chunk_size=chunk, out=str(tmp_path / "rate.npy"), progress=False)
    pol = jaxcrawl.lambda_crawl(p) if objective == "harmonic" else jaxcrawl.binary_lambda_crawl(p, epsilon)
    np.testing.assert_allclose(res.rate, pol.rate, rtol=1e-12, atol=1e-12 * float(p.bandwidth) / p.num_pages)
    np.testing.assert_allclose(res.dual, float(pol.dual), rtol=1e-12)
    assert abs(res.residual) <= 1e-9 * float(p.bandwidth)
    assert src.num_passes == res.num_steps + 4
    assert res.prob is None and res.on_signal is None  # written to out: the rates only
    assert np.load(tmp_path / "rate.npy", mmap_mode="r").shape == (p.num_pages,)


def test_stream_progress_bar_counts_every_chunk_read(table, capsys, monkeypatch):
    """``progress=True`` draws a bar on stderr; it advances once per chunk read, over every
    pass (bounds, bracket, each root-finding step, residual, writing: chunks x passes),
    naming each pass; the rates are those of ``progress=False``, which writes nothing."""
    from jaxcrawl.parallel import _streaming

    _, t = table
    chunk = 8192
    quiet, _ = stream(t, 5000.0, chunk_size=chunk, progress=False)
    assert capsys.readouterr().err == ""
    loud, _ = stream(t, 5000.0, chunk_size=chunk, progress=True)
    assert "stream: " in capsys.readouterr().err
    np.testing.assert_array_equal(loud.rate, quiet.rate)

    seen = {"labels": [], "count": 0, "closed": False}

    class Bar:  # records what the streamed solve tells its bar
        def set_description(self, text, refresh=True):
            seen["labels"].append(text)

        def update(self, k):
            seen["count"] += k

        def set_postfix(self, **kw):
            pass

        def close(self):
            seen["closed"] = True

    monkeypatch.setattr(_streaming, "progress_bar", lambda *a, **k: Bar())
    res, src = stream(t, 5000.0, chunk_size=chunk, progress=True)
    assert seen["count"] == -(-t.num_pages // chunk) * src.num_passes and seen["closed"]
    assert seen["labels"] == (["stream: bounds", "stream: bracket"]
                              + [f"stream: step {k}" for k in range(1, res.num_steps + 1)]
                              + ["stream: residual", "stream: writing rates"])


def test_page_table_errors(tmp_path):
    with pytest.raises(ValueError, match="missing importance.npy"):
        PageTable(str(tmp_path))
    with pytest.raises(ValueError, match="importance must be finite and > 0"):
        write_page_table(str(tmp_path / "x"), [1.0, -1.0], [1.0, 1.0])
    t = write_page_table(str(tmp_path / "y"), [1.0, 1.0], [1.0, 1.0], [True, True])
    with pytest.raises(ValueError, match="exceeds what the problem can use"):
        stream(t, 5.0)
    with pytest.raises(ValueError, match="objective"):
        stream(t, 1.0, "nope")


def test_shard_pages_requires_divisible_pages():
    mesh = page_mesh()
    p = jaxcrawl.synthetic(jax.random.key(0), 10)
    shard_pages(p, mesh)  # one device here: always divisible
    if len(jax.devices()) > 1:  # pragma: no cover - exercised in the subprocess test
        with pytest.raises(ValueError, match="multiple of the mesh size"):
            shard_pages(jaxcrawl.synthetic(jax.random.key(0), len(jax.devices()) + 1), mesh)


@pytest.mark.long
def test_sharded_equals_single_device_on_8_host_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    script = os.path.join(os.path.dirname(__file__), "scripts", "sharded_equivalence.py")
    proc = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    diffs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(diffs) == {"lambda_crawl", "lambda_crawl_approx", "binary_lambda_crawl", "capped_bounded", "mle",
                          "async_mirror_sync_sweep"}
    assert all(v <= 1e-9 for v in diffs.values()), diffs
