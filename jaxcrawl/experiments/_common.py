"""Shared machinery of the paper reproductions (``jaxcrawl reproduce``).

Every experiment is one module of this package (``jaxcrawl/experiments/<NAME>.py``) that
exposes

* ``NAME`` -- the name used on the command line (``jaxcrawl reproduce NAME``);
* ``DESCRIPTION`` -- one line: which paper, which figure, what it shows;
* ``run(ctx) -> dict`` -- computes the figure's numbers, draws ``ctx.figure_path`` with
  :meth:`Context.savefig`, and returns ``{"params": {...}, "results": {...},
  "claims": [Claim, ...], "notes": [...]}`` (``notes`` optional).  Everything in
  ``params``/``results`` must be JSON-able after :func:`to_jsonable` (numbers, strings,
  lists, dicts, NumPy/JAX arrays).

The :class:`Context` handed to ``run`` carries the options (``quick``, ``seed``, ``data``,
``out``), derives PRNG keys (:meth:`Context.key`), shows progress bars
(:meth:`Context.progress`) and stores each finished chunk of work on disk
(:meth:`Context.cached`, :meth:`Context.run_chunks`) with
:class:`jaxcrawl.io.CheckpointStore` under ``OUT/.checkpoints/NAME/``, so an
interrupted run, started again with the same command, resumes where it stopped.  A chunk is
reused only when its fingerprint matches: the experiment's name, ``--quick``, ``--seed``,
``--data``, the jaxcrawl version and the source of the experiment file and of this file
(editing either invalidates its chunks).

:func:`claim` builds the checked claims.  A claim states the paper's finding as an
assertion on our numbers (a slope, an ordering, a ratio) with its tolerance.  Its
``expected`` outcome is ``True`` unless the finding is known *not* to reproduce on the
data used (``expected=False``, with the reason in ``note``); a run fails when an outcome
differs from its expectation, and the summary lists every paper finding not reproduced.

Plot helpers (matplotlib, Agg backend): :func:`new_figure`, :func:`band`,
:func:`bar_panel`, :func:`loglog_slope`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jaxcrawl._src.fileio import write_file  # noqa: E402
from jaxcrawl.io import CheckpointStore  # noqa: E402  (re-exported: experiments' chunk store)

__all__ = [
    "Claim",
    "claim",
    "Context",
    "Progress",
    "CheckpointStore",
    "to_jsonable",
    "new_figure",
    "band",
    "bar_panel",
    "log_axis",
    "loglog_slope",
    "crawl_problem",
]


# ----------------------------------------------------------------------------- claims
@dataclasses.dataclass
class Claim:
    """One checked claim of a figure.

    Attributes:
      name: short identifier (``snake_case``), unique within the experiment.
      holds: whether the assertion is true on our numbers.
      description: the assertion, in words, with the numbers it compares.
      tolerance: the tolerance of the check, in words (e.g. ``"ratio >= 2"``).
      paper: what the paper says (quote or paraphrase, with the figure/section).
      expected: the outcome we expect on the data used: ``True`` for a finding that
        reproduces; ``False`` for a paper finding documented not to reproduce here (then
        ``note`` says why).  A claim *passes* when ``holds == expected``.
      note: why the outcome differs from the paper, when it does.
      values: the numbers behind the check (JSON-able).
    """

    name: str
    holds: bool
    description: str
    tolerance: str
    paper: str = ""
    expected: bool = True
    note: str = ""
    values: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.holds) == bool(self.expected)

    def as_dict(self) -> dict[str, Any]:
        d = dict(holds=bool(self.holds), expected=bool(self.expected), passed=self.passed,
                 description=self.description, tolerance=self.tolerance, paper=self.paper)
        if self.note:
            d["note"] = self.note
        d["values"] = to_jsonable(self.values)
        return d


def claim(name: str, holds, *, description: str, tolerance: str, paper: str = "",
          expected: bool = True, note: str = "", **values) -> Claim:
    """Build a :class:`Claim`; ``holds`` is converted with ``bool`` (NumPy bools welcome)."""
    return Claim(name, bool(holds), description, tolerance, paper, bool(expected), note, dict(values))


# ------------------------------------------------------------------------------ JSON
def to_jsonable(x):
    """Convert NumPy/JAX arrays and scalars (nested in dicts/lists) to plain JSON values.

    Non-finite floats become the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (strict JSON
    has no infinities; the harmonic cost of a starving policy is infinite).
    """
    if isinstance(x, Claim):
        return x.as_dict()
    if isinstance(x, Mapping):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if math.isfinite(v):
            return v
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(x, (str, type(None))):
        return x
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "__array__") or hasattr(x, "shape"):
        a = np.asarray(x)
        if a.ndim == 0:
            return to_jsonable(a.item())
        return to_jsonable(a.tolist())
    raise TypeError(f"cannot convert {type(x).__name__} to JSON")


# --------------------------------------------------------------------------- progress
class Progress:
    r"""A dependency-free progress bar on stderr.

    On a terminal it redraws one line (``\r``); otherwise (logs, CI) it prints a line at
    most every ``log_interval`` seconds and at the end.  Use as a context manager or call
    :meth:`close`.
    """

    def __init__(self, total: int, desc: str, *, stream=None, log_interval: float = 10.0,
                 enabled: bool = True):
        self.total = max(int(total), 0)
        self.desc = desc
        self.stream = sys.stderr if stream is None else stream
        self.count = 0
        self.start = time.perf_counter()
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.log_interval = log_interval
        self._last = self.start
        self._drawn = -1
        self._closed = False
        self._draw()

    def _line(self) -> str:
        elapsed = time.perf_counter() - self.start
        frac = self.count / self.total if self.total else 1.0
        width = 24
        filled = int(round(frac * width))
        bar = "#" * filled + "-" * (width - filled)
        eta = ""
        if 0 < self.count < self.total:
            eta = f", ETA {elapsed / self.count * (self.total - self.count):.0f}s"
        return f"  {self.desc} [{bar}] {self.count}/{self.total} {elapsed:.1f}s{eta}"

    def _draw(self, force: bool = False):
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.tty:
            self.stream.write("\r" + self._line())
            self.stream.flush()
        elif (force or now - self._last >= self.log_interval) and self._drawn != self.count:
            self.stream.write(self._line() + "\n")
            self.stream.flush()
            self._last = now
            self._drawn = self.count

    def update(self, n: int = 1):
        self.count = min(self.total, self.count + int(n))
        self._draw()

    def close(self):
        if self._closed:
            return
        self._closed = True
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r" + self._line() + "\n")
            self.stream.flush()
        else:
            self._draw(force=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# ----------------------------------------------------------------------------- context
def _file_digest(path) -> str:
    try:
        return hashlib.sha1(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def _dir_signature(directory) -> list:
    """Names, sizes and modification times of the files in ``directory`` (``[]`` for ``None``),
    so checkpoints computed from a data set are not reused after its files change."""
    if directory is None or not Path(directory).is_dir():
        return []
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                  for p in Path(directory).iterdir() if p.is_file())


class Context:
    """What an experiment's ``run(ctx)`` receives.

    Attributes:
      name: the experiment's ``NAME``.
      quick: reduced sizes (CI) instead of the papers' sizes.
      seed: the base seed (``--seed``); use :meth:`key` for PRNG keys.
      data: ``Path`` of ``--data DIR`` or ``None``.
      out: output directory.
      figure_path: where :meth:`savefig` writes (``OUT/NAME.png``).
      store: the :class:`CheckpointStore` of this run.
    """

    def __init__(self, name: str, *, quick: bool, seed: int, out, data=None,
                 source_file=None, fresh: bool = False, stream=None, progress: bool = True):
        self.name = name
        self.quick = bool(quick)
        self.seed = int(seed)
        self.out = Path(out)
        self.data = None if data is None else Path(data)
        self.figure_path = self.out / f"{name}.png"
        self.stream = sys.stderr if stream is None else stream
        self.show_progress = progress
        try:
            import jaxcrawl
            version = getattr(jaxcrawl, "__version__", "unknown")
        except ImportError:  # pragma: no cover
            version = "unknown"
        fp = dict(name=name, quick=self.quick, seed=self.seed,
                  data=None if self.data is None else str(self.data.resolve()),
                  data_files=_dir_signature(self.data),
                  version=version, source=_file_digest(source_file) if source_file else "",
                  common=_file_digest(__file__))
        fingerprint = hashlib.sha1(json.dumps(fp, sort_keys=True).encode()).hexdigest()
        self.store = CheckpointStore(self.out / ".checkpoints" / name, fingerprint, enabled=not fresh)
        self._figure_saved = False

    # sizes -------------------------------------------------------------------------
    def size(self, quick_value, full_value):
        """``quick_value`` under ``--quick``, else ``full_value``."""
        return quick_value if self.quick else full_value

    # randomness ----------------------------------------------------------------------
    def key(self, *tags):
        """A PRNG key derived from ``--seed`` and the string/int ``tags`` (stable across runs)."""
        import jax

        key = jax.random.key(self.seed)
        for tag in tags:
            key = jax.random.fold_in(key, zlib.crc32(str(tag).encode()) & 0x7FFFFFFF)
        return key

    # progress and checkpoints ----------------------------------------------------------
    def progress(self, total: int, desc: str) -> Progress:
        """A :class:`Progress` bar for ``total`` steps."""
        return Progress(total, desc, stream=self.stream, enabled=self.show_progress)

    def log(self, message: str) -> None:
        """A progress message on stderr."""
        if self.show_progress:
            self.stream.write(f"  {message}\n")
            self.stream.flush()

    def cached(self, chunk: str, fn: Callable[[], Any]):
        """``fn()``'s value, computed once and stored as checkpoint ``chunk``.

        The chunk name must identify the work (include the parameters that vary between
        chunks).  JAX arrays in the value are stored as NumPy arrays.
        """
        return self.store.get_or_compute(chunk, fn)

    def run_chunks(self, desc: str, chunks: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run (or reload) every chunk in order, with a progress bar; returns ``{chunk: value}``."""
        out = {}
        with self.progress(len(chunks), desc) as bar:
            for name, fn in chunks.items():
                out[name] = self.cached(name, fn)
                bar.update()
        return out

    # figures ---------------------------------------------------------------------------
    def savefig(self, fig, **kwargs) -> Path:
        """Save ``fig`` to ``figure_path`` (PNG, 110 dpi, tight) and close it."""
        self.out.mkdir(parents=True, exist_ok=True)
        kwargs.setdefault("dpi", 110)
        kwargs.setdefault("bbox_inches", "tight")
        write_file(self.figure_path, lambda fh: fig.savefig(fh, format="png", **kwargs), binary=True)  # atomic
        plt.close(fig)
        self._figure_saved = True
        return self.figure_path


# ------------------------------------------------------------------------------ plots
PALETTE = {
    "LC": "#1f77b4", "LCA": "#17becf", "BLC": "#d62728", "BLCε": "#ff7f0e", "UC": "#7f7f7f",
    "CC": "#8c564b", "LC-CO": "#1f77b4", "LC-IO": "#9467bd",
    "naive": "#7f7f7f", "MLE": "#2ca02c", "MM": "#9467bd", "LLN": "#1f77b4", "SA": "#d62728",
    "SAM": "#ff7f0e", "bound": "#1f77b4",
    "MirrorSync": "#1f77b4", "AsyncMirrorSync": "#ff7f0e", "AsyncPSGDSync": "#2ca02c",
}


def new_figure(nrows: int = 1, ncols: int = 1, *, width: float = 4.2, height: float = 3.3,
               title: str | None = None, **kwargs):
    """``(fig, axes)`` with ``axes`` always a 2-D array; ``title`` becomes the suptitle."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False, **kwargs)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig, axes


def band(ax, x, center, lower=None, upper=None, *, label=None, color=None, style="-",
         alpha=0.2, **kwargs):
    """A line with an optional shaded band (e.g. mean and 95% band, median and quartiles)."""
    line, = ax.plot(x, center, style, label=label, color=color, **kwargs)
    if lower is not None and upper is not None:
        ax.fill_between(x, lower, upper, color=line.get_color(), alpha=alpha, linewidth=0)
    return line


def bar_panel(ax, labels: Sequence[str], values: Sequence[float], *, ylabel: str = "",
              title: str = "", log: bool = False, fmt: str = "{:.3g}"):
    """Bars with their values written on top; infinite values are drawn as a hatched bar
    reaching the top of the axis and labelled ``∞``."""
    vals = np.asarray(values, float)
    finite = np.isfinite(vals)
    top = np.max(vals[finite]) if finite.any() else 1.0
    heights = np.where(finite, vals, top * (3.0 if log else 1.25))
    colors = [PALETTE.get(l, None) for l in labels]
    bars = ax.bar(range(len(labels)), heights, color=colors, edgecolor="black", linewidth=0.6)
    for b, v, ok in zip(bars, vals, finite):
        if not ok:
            b.set_hatch("//")
            b.set_alpha(0.45)
        ax.annotate("∞" if not ok else fmt.format(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8 if ok else 12, xytext=(0, 2),
                    textcoords="offset points")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    if log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, np.max(heights) * 1.15)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)


def log_axis(ax, which: str = "y") -> None:
    """Log scale with plain-number tick labels at 1, 2, 5 x 10^k (no ``4x10^2`` minor labels)."""
    from matplotlib import ticker

    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(ticker.LogLocator(base=10, subs=tuple(range(1, 10))))
    axis.set_minor_formatter(ticker.NullFormatter())


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x`` (finite, positive points only)."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


# ------------------------------------------------------------------------------ device
def per_call(total: int, default: int, one_call: Callable[[], Any] | None = None, *, share: float = 0.5) -> int:
    """How many of ``total`` independent items one compiled call should take.

    On a CPU: ``default`` (a vmapped batch there costs about its items' time in sequence and
    only adds memory).  On an accelerator, as many as fit in ``share`` of the device's memory,
    by XLA's memory analysis of ``one_call()`` (the lowered call of one item): a vmapped
    batch runs its items at once."""
    import jax

    if jax.default_backend() == "cpu" or one_call is None:
        return min(default, total)
    stats = jax.devices()[0].memory_stats() or {}
    limit = stats.get("bytes_limit")
    if not limit:
        return min(default, total)
    mem = one_call().compile().memory_analysis()
    need = max(int(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes), 1)
    return int(max(1, min(total, share * limit // need)))


# ------------------------------------------------------------------------------ data
def crawl_problem(ctx: Context, num_pages: int, *, dtype=None):
    """The NeurIPS-19 experiments' problem: the data set under ``--data DIR``, else synthetic.

    With ``--data`` the directory is read with :func:`jaxcrawl.io.load_crawl_dataset`;
    as in NeurIPS-19 §9.4 the change rates are estimated from the whole history (MLE,
    eq. 10, for incomplete pages; the given Poisson rate, eq. 11, for complete ones) and
    used as ground truth.  Pages with importance 0, with no observation (incomplete) or
    with a zero rate (complete) cannot enter a :class:`~jaxcrawl.CrawlProblem` and are
    dropped (counted in the returned description).  Without ``--data``:
    ``jaxcrawl.synthetic(ctx.key("problem"), num_pages)`` (bandwidth 20% of pages).

    Returns:
      ``(problem, info)`` with ``info`` a JSON-able dict describing the source.
    """
    import jax.numpy as jnp

    import jaxcrawl
    from jaxcrawl import estimators

    dtype = jnp.float32 if dtype is None else dtype
    if ctx.data is None:
        problem = jaxcrawl.synthetic(ctx.key("problem"), num_pages, dtype=dtype)
        return problem, dict(source="synthetic", num_pages=int(num_pages),
                             num_complete=int(np.sum(np.asarray(problem.complete))),
                             generator="jaxcrawl.synthetic (NeurIPS-19 §9.1 shapes)")
    ds = jaxcrawl.io.load_crawl_dataset(str(ctx.data))
    imp = np.asarray(ds.importance, np.float64)
    comp = np.asarray(ds.complete, bool)
    rate = np.full(imp.shape, np.nan)
    has_obs = np.asarray(ds.num_observations) > 0
    if np.any(~comp & has_obs):
        idx = np.flatnonzero(~comp & has_obs)
        est = estimators.mle(np.asarray(ds.intervals[idx]), np.asarray(ds.changed[idx]),
                             np.asarray(ds.mask[idx]))
        rate[idx] = np.asarray(est, np.float64)
    rate[comp] = np.asarray(ds.complete_change_rate, np.float64)[comp]
    keep = (imp > 0) & np.isfinite(rate) & (rate > 0)
    n = int(keep.sum())
    if n == 0:
        raise ValueError(f"--data {ctx.data}: no usable page (importance > 0 and a positive change rate)")
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp[keep], dtype), jnp.asarray(rate[keep], dtype),
                                    jnp.asarray(0.2 * n, dtype), jnp.asarray(comp[keep]))
    return problem, dict(source=str(ctx.data), num_pages=n, num_complete=int(comp[keep].sum()),
                         dropped_pages=int((~keep).sum()),
                         estimator="MLE (NeurIPS-19 eq. 10) for incomplete pages; given rate for complete")
