"""Ragged histories in bounded memory: histories
are stored flat and `jaxcrawl estimate` pads each group of similar-length pages only to its
own width, so memory follows the number of observations, not pages x the longest history."""
import tracemalloc

import numpy as np
import pytest

from jaxcrawl import estimators as E
from jaxcrawl.cli._estimate import estimate_rates
from jaxcrawl.io import read_histories


def _write(path, lengths, seed=0):
    rng = np.random.default_rng(seed)
    rate = np.exp(rng.uniform(-1.5, 1.0, len(lengths)))
    rows = ["page_id,interval,changed"]
    for i, k in enumerate(lengths):
        w = rng.exponential(1.0, k) + 0.05
        c = rng.uniform(size=k) < 1 - np.exp(-rate[i] * w)
        rows += [f"p{i},{x!r},{int(y)}" for x, y in zip(w.tolist(), c.tolist())]
    path.write_text("\n".join(rows) + "\n")


@pytest.mark.long
def test_flat_histories_and_grouped_estimates_equal_the_padded_estimator(tmp_path):
    """Pages of 1..300 observations (and their padded view) -- MLE, moment matching and
    naive by length groups equal the estimator on the whole padded array; the padded view
    rebuilt from the flat storage is the CSV's rows in order."""
    lengths = [1, 2, 3, 5, 8, 9, 17, 31, 64, 65, 300, 2, 2, 7]
    _write(tmp_path / "h.csv", lengths)
    h = read_histories(tmp_path / "h.csv", dtype=np.float64)
    assert h.num_observations.tolist() == lengths and h.offsets[-1] == sum(lengths)
    w, c, m = h.intervals, h.changed, h.mask
    assert w.shape == (len(lengths), 300) and m.sum() == sum(lengths)
    for estimator, ref in (("mle", lambda: E.mle(w, c, m, min_rate=1e-3, max_rate=25.0)),
                           ("moment-matching", lambda: E.moment_matching(w, c, m, min_rate=1e-3, max_rate=25.0)),
                           ("naive", lambda: np.clip(E.naive(w, c, m), 1e-3, 25.0))):  # clipped like the others
        got, half = estimate_rates(h, estimator, min_rate=1e-3, max_rate=25.0, batch_size=4, dtype=np.float64)
        np.testing.assert_allclose(got, np.asarray(ref(), np.float64), rtol=1e-5, err_msg=estimator)
    want_hw = np.asarray(E.lemma3_halfwidth(w, m, delta=0.05, min_rate=1e-3, max_rate=25.0), np.float64)
    np.testing.assert_allclose(half, want_hw, rtol=1e-5)


@pytest.mark.long
def test_one_long_history_among_many_short_ones_stays_small(tmp_path):
    """20,000 pages of 2 observations and one of 20,000: padding to the longest would take
    20,001 x 20,000 slots (2.4 GB in float32 with the masks); the flat read and the
    grouped estimate stay under 60 MB of host allocations (tracemalloc), and the long
    page's estimate equals the estimator on it alone."""
    lengths = [2] * 20_000 + [20_000]
    _write(tmp_path / "h.csv", lengths, seed=1)
    tracemalloc.start()
    h = read_histories(tmp_path / "h.csv", dtype=np.float32)
    rates, _ = estimate_rates(h, "mle", dtype=np.float32)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 60e6, peak
    w, c, m = h.padded(np.array([20_000]))
    np.testing.assert_allclose(rates[-1], float(E.mle(w, c, m)[0]), rtol=1e-6)
    assert np.all(np.isfinite(rates)) and rates.shape == (20_001,)
