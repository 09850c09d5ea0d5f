r"""A resumable sweep over seeds × instances × a hyperparameter grid, for any learner.

Instance ``p`` and seed ``s`` get the key :func:`sweep_key` ``(key, p, s)`` at every grid
point (common random numbers, as ICML-20 App. B's fixed seed), so row ``[g, p, s]`` equals
``run_learner(sweep_key(key, p, s), learner, problem_p, num_steps, params_g)``.  In a
``jax.distributed`` job the runs are split over the processes (by blocks of seeds when there
are at least as many seeds as processes, else by grid chunks), each process checkpoints its
own chunks, and the outputs are all-gathered: every process returns the whole sweep.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcrawl._src.fileio import load_tree, save_tree, write_json
from jaxcrawl.parallel import allgather_host, check_consistent

from ._base import Learner, check_learner_params, run_learner

MANIFEST = "manifest.json"
_VERSION = 1


def sweep_key(key: jax.Array, problem_index: ArrayLike, seed: ArrayLike) -> jax.Array:
    """The key :func:`run_sweep` gives instance ``problem_index`` and seed ``seed``:
    ``fold_in(fold_in(key, problem_index), seed)`` (independent of the grid point)."""
    return jax.random.fold_in(jax.random.fold_in(key, problem_index), seed)


def grid_product(cls: type, **axes: Any) -> Any:
    """The Cartesian product of 1-D value lists as a ``cls`` NamedTuple of ``(G,)`` arrays.

    Fields not given take ``cls``'s defaults (broadcast to ``(G,)``).  Axes vary in the
    order given, the last fastest (like ``itertools.product``).  An axis of names (a field
    with a companion ``<field>_names``, e.g. ``LLCParams.solver``) is stored as the position
    of each point's name in ``<field>_names``, so the grid stays arrays that ``jax.vmap``
    sweeps and the learner maps each name to its own inner solver.

    Example: ``grid_product(LLCParams, suffix_epochs=[3, 7, 21], smoothing=[0.25, 0.5])``;
    ``grid_product(LLCParams, solver=["harmonic", "harmonic-approx", "binary-epsilon"])``.
    """
    if not axes:
        raise ValueError("grid_product needs at least one axis")
    names = list(axes)
    unknown = [n for n in names if n not in cls._fields]
    if unknown:
        raise ValueError(f"unknown fields {unknown} for {cls.__name__}; fields are {cls._fields}")
    labels = {}
    values = []
    for n in names:
        raw = list(axes[n]) if isinstance(axes[n], list | tuple) else None
        if raw and all(not isinstance(v, int | float | np.number) for v in raw):  # an axis of names
            if f"{n}_names" not in cls._fields:
                raise ValueError(f"{cls.__name__}.{n} takes numbers; got {axes[n]!r}")
            labels[n] = tuple(dict.fromkeys(raw))
            values.append(np.asarray([labels[n].index(v) for v in raw], dtype=float))
        else:
            values.append(np.asarray(axes[n], dtype=float).ravel())
    if any(v.size == 0 for v in values):
        raise ValueError("every grid axis needs at least one value")
    mesh = np.meshgrid(*values, indexing="ij")
    flat = {n: m.ravel() for n, m in zip(names, mesh)}
    size = mesh[0].size
    defaults = cls()
    fields = {}
    for f in cls._fields:
        if f.endswith("_names") and f[:-len("_names")] in cls._fields:  # static labels, not an axis
            fields[f] = labels.get(f[:-len("_names")], getattr(defaults, f))
            continue
        v = flat[f] if f in flat else np.full(size, np.asarray(getattr(defaults, f), float))
        fields[f] = jnp.asarray(v)
    return cls(**fields)


# ------------------------------------------------------------------------------ sweep
class SweepResult(NamedTuple):
    """What :func:`run_sweep` returns.

    Attributes:
      params: the grid (a pytree of ``(G, ...)`` arrays), or ``None``.
      outputs: the pytree returned by ``transform(final_state, info, problem, params)`` (default
        ``info``) as NumPy arrays with leading axes ``(G, P, S)`` -- grid, instance,
        seed -- then the step axis.
      computed_chunks: indices of the chunks computed by this call (the others were
        loaded from ``out_dir``).
      num_chunks: number of chunks of the grid.
      out_dir: where the chunks are stored (``None``: in memory only).
    """

    params: Any
    outputs: Any
    computed_chunks: tuple
    num_chunks: int
    out_dir: str | None


def _leading(tree):
    leaves = jax.tree_util.tree_leaves(tree)
    return None if not leaves else int(np.shape(leaves[0])[0])


def _hash_update(h, tree):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    h.update(str(treedef).encode())
    for leaf in leaves:
        a = np.asarray(leaf)
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(np.ascontiguousarray(a).tobytes())


def _key_bytes(key):
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key)


def _transform_name(transform):
    if transform is None:
        return "info"
    f = getattr(transform, "func", transform)
    return f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', type(f).__name__)}"


def _fingerprint(key, learner, problems, params, num_steps, num_seeds, chunk_size, tag, transform):
    h = hashlib.sha256()
    h.update(f"v{_VERSION}|{learner.name}|{num_steps}|{num_seeds}|{chunk_size}|{tag}|"
             f"{_transform_name(transform)}".encode())
    h.update(_key_bytes(key).tobytes())
    _hash_update(h, problems)
    _hash_update(h, params)
    return h.hexdigest()


@functools.partial(jax.jit, static_argnames=("learner", "num_steps", "transform"))
def _sweep_chunk(key, learner, problems, params, num_steps, seeds, transform):
    """(g, P, S) runs in one call: vmap over grid ∘ vmap over instances ∘ vmap over seeds."""
    num_problems = _leading(problems)

    def one(p_idx, problem, prm, seed):
        final, info = run_learner(sweep_key(key, p_idx, seed), learner, problem, num_steps, prm)
        return info if transform is None else transform(final, info, problem, prm)

    over_seeds = jax.vmap(one, in_axes=(None, None, None, 0))
    over_problems = jax.vmap(over_seeds, in_axes=(0, 0, None, None))
    p_idx = jnp.arange(num_problems)
    if params is None:
        return jax.tree_util.tree_map(lambda x: x[None], over_problems(p_idx, problems, None, seeds))
    over_grid = jax.vmap(over_problems, in_axes=(None, None, 0, None))
    return over_grid(p_idx, problems, params, seeds)


def run_sweep(key: jax.Array, learner: Learner, problems: Any, params: Any = None, *,
              num_seeds: int, num_steps: int, chunk_size: int | None = None,
              out_dir: str | None = None, transform: Callable[..., Any] | None = None,
              tag: str = "", on_chunk: Callable[[int, Any], None] | None = None,
              split_processes: bool = True) -> SweepResult:
    """Run ``learner`` for every grid point × instance × seed; resumable on disk.

    Each chunk of ``chunk_size`` grid points is one compiled call (jit of three nested
    ``vmap``s around :func:`run_learner`); the last chunk is padded by repeating its
    last grid point (so every chunk has one shape and compiles once) and the padding is
    dropped.  With ``out_dir`` every finished chunk is written atomically to
    ``out_dir/chunk_XXXXX.npz`` and recorded in ``out_dir/manifest.json`` with a
    fingerprint of all inputs (key, learner name, problems, grid, sizes, transform name,
    ``tag``); a later call with the same inputs loads the finished chunks and computes
    only the missing ones.  A manifest with a different fingerprint raises ``ValueError``
    (results of different sweeps are never mixed).

    Args:
      key: PRNG key; instance ``p`` and seed ``s`` use :func:`sweep_key` ``(key, p, s)``.
      learner: a :class:`Learner`.
      problems: the instances, a pytree (e.g. a batched
        :class:`~jaxcrawl.CrawlProblem`) with a leading instance axis ``P``;
        scalar leaves (e.g. a shared bandwidth) must be broadcast to ``(P,)`` first.
      params: the grid, a pytree of arrays with a leading axis ``G`` (e.g. from
        :func:`grid_product`), or ``None`` (the learner's defaults; ``G = 1``).
      num_seeds: seeds per instance (static).
      num_steps: steps per run (static).
      chunk_size: grid points per compiled call (default: the whole grid).
      out_dir: directory for the chunk files and the manifest (created if missing).
      transform: optional ``(final_state, info, problem, params) -> pytree`` applied
        inside the compiled call to keep or derive what is needed (default: all of
        ``info``; e.g. :func:`~jaxcrawl.learners.etc_grid_transform`).  It
        is a static argument: pass the same hashable object (a module-level function)
        to reuse the compiled program.  Its qualified name enters the fingerprint.
      tag: free text folded into the fingerprint (e.g. a code version).
      on_chunk: optional callback ``on_chunk(index, outputs)`` after each computed chunk
        is stored (for progress reports; an exception raised here interrupts the sweep
        after that chunk was saved).  With several processes, ``outputs`` is this
        process's share of the chunk.
      split_processes: with several ``jax.distributed`` processes, split the runs over
        them (default); ``False`` runs the whole sweep on every process.

    Returns:
      :class:`SweepResult` with outputs of shape ``(G, P, S, ...)``.
    """
    if not isinstance(num_seeds, int) or num_seeds < 1:
        raise ValueError(f"num_seeds must be a positive int, got {num_seeds!r}")
    if not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
    num_problems = _leading(problems)
    if num_problems is None or any(np.ndim(l) == 0 or np.shape(l)[0] != num_problems
                                   for l in jax.tree_util.tree_leaves(problems)):
        raise ValueError("problems must have a leading instance axis on every leaf "
                         "(broadcast scalar fields such as bandwidth to (P,))")
    grid_size = 1 if params is None else _leading(params)
    if params is not None and any(np.shape(l)[:1] != (grid_size,) for l in jax.tree_util.tree_leaves(params)):
        raise ValueError("every leaf of params must have the same leading grid axis")
    if getattr(learner.init, "check", None) is not None:  # the grid's hyperparameters, eagerly, per instance
        for p in range(num_problems):
            check_learner_params(learner, jax.tree_util.tree_map(lambda a, p=p: a[p], problems), params)
    chunk = grid_size if chunk_size is None else int(chunk_size)
    if chunk < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size!r}")
    chunk = min(chunk, grid_size)
    num_chunks = -(-grid_size // chunk)

    nproc = jax.process_count() if split_processes else 1
    pid = jax.process_index() if nproc > 1 else 0
    by_seeds = num_seeds >= nproc
    if nproc > 1 and by_seeds:  # a block of seeds per process (the last padded by repeating its last seed)
        block = -(-num_seeds // nproc)
        seeds = np.minimum(np.arange(pid * block, (pid + 1) * block), num_seeds - 1)
    else:
        seeds = np.arange(num_seeds)
    mine = [c for c in range(num_chunks) if nproc == 1 or by_seeds or c % nproc == pid]
    suffix = "" if nproc == 1 else f".p{pid}of{nproc}"
    fp_all = _fingerprint(key, learner, problems, params, num_steps, num_seeds, chunk, tag, transform)
    if nproc > 1:
        check_consistent(sweep_inputs=fp_all, out_dir=os.path.abspath(out_dir) if out_dir else None)

    manifest_path = None
    manifest = None
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        manifest_path = os.path.join(out_dir, MANIFEST if nproc == 1 else f"manifest{suffix}.json")
        fp = fp_all if nproc == 1 else f"{fp_all}|{nproc}"
        if os.path.exists(manifest_path):
            with open(manifest_path) as f:
                manifest = json.load(f)
            if manifest.get("fingerprint") != fp:
                raise ValueError(
                    f"{manifest_path} belongs to a different sweep (fingerprint mismatch); "
                    "use another out_dir or remove it")
        else:
            manifest = dict(version=_VERSION, fingerprint=fp, learner=learner.name,
                            grid_size=grid_size, chunk_size=chunk, num_chunks=num_chunks,
                            num_problems=num_problems, num_seeds=num_seeds,
                            num_steps=num_steps, tag=tag, finished={},
                            **({} if nproc == 1 else dict(process=pid, num_processes=nproc,
                                                          seeds=seeds.tolist(), chunks=mine)))
            write_json(manifest_path, manifest)

    def chunk_params(c):
        if params is None:
            return None
        idx = np.minimum(np.arange(c * chunk, (c + 1) * chunk), grid_size - 1)
        return jax.tree_util.tree_map(lambda a: jnp.asarray(a)[idx], params)

    results = [None] * num_chunks
    computed = []
    treedef = None

    def stored(c):
        return (manifest is not None and str(c) in manifest["finished"]
                and os.path.exists(os.path.join(out_dir, manifest["finished"][str(c)]["file"])))

    seeds_arr = jnp.asarray(seeds)
    for c in mine:
        fname = f"chunk_{c:05d}{suffix}.npz"
        if stored(c):
            if treedef is None:  # the output structure, from an abstract trace (no compute)
                shapes = jax.eval_shape(_sweep_chunk, key, learner, problems, chunk_params(c),
                                        num_steps, seeds_arr, transform)
                treedef = jax.tree_util.tree_structure(shapes)
            results[c] = load_tree(os.path.join(out_dir, fname), treedef)
            continue
        out = _sweep_chunk(key, learner, problems, chunk_params(c), num_steps, seeds_arr, transform)
        valid = min(chunk, grid_size - c * chunk)
        out = jax.tree_util.tree_map(lambda a: np.asarray(a)[:valid], out)
        treedef = jax.tree_util.tree_structure(out)
        results[c] = out
        computed.append(c)
        if manifest is not None:
            save_tree(os.path.join(out_dir, fname), out)
            manifest["finished"][str(c)] = dict(file=fname, rows=valid, time=time.time())
            write_json(manifest_path, manifest)
        if on_chunk is not None:
            on_chunk(c, out)
    if nproc > 1:
        if not mine:  # this process owns no chunk: zeros of the chunk's shape stand in for it
            shapes = jax.eval_shape(_sweep_chunk, key, learner, problems, chunk_params(0), num_steps,
                                    seeds_arr, transform)
            results[0] = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), shapes)
        results = _gather_chunks(results, num_chunks, num_seeds, by_seeds, nproc)
    outputs = jax.tree_util.tree_map(lambda *xs: np.concatenate(xs, axis=0), *results)
    grid = None if params is None else jax.tree_util.tree_map(np.asarray, params)
    return SweepResult(grid, outputs, tuple(computed), num_chunks, out_dir)


def _gather_chunks(results, num_chunks, num_seeds, by_seeds, nproc):
    """Every process's share of every chunk, on every process (exact byte all-gathers)."""
    template = next(r for r in results if r is not None)
    full = max(int(np.shape(jax.tree_util.tree_leaves(r)[0])[0]) for r in results if r is not None)
    full = int(allgather_host(np.asarray([full], np.int64)).max())
    out = []
    for c in range(num_chunks):
        owner = c % nproc
        mine = results[c] if results[c] is not None else jax.tree_util.tree_map(np.zeros_like, template)
        rows = int(np.shape(jax.tree_util.tree_leaves(mine)[0])[0])
        padded = jax.tree_util.tree_map(  # the same shape on every process (the last chunk has fewer rows)
            lambda a: np.concatenate([a, np.zeros((full - a.shape[0],) + a.shape[1:], a.dtype)]), mine)
        rows_all = allgather_host(np.asarray([rows], np.int64))[:, 0]
        got = jax.tree_util.tree_map(allgather_host, padded)  # (nproc, g, P, S_block, ...)
        if by_seeds:  # concatenate the seed blocks, drop the padding seeds and rows
            res = jax.tree_util.tree_map(
                lambda a: np.concatenate(list(a), axis=2)[:rows_all[0], :, :num_seeds], got)
        else:
            res = jax.tree_util.tree_map(lambda a: a[owner][:rows_all[owner]], got)
        out.append(res)
    return out


def load_sweep(out_dir: str, treedef: Any = None) -> tuple[dict, dict[int, Any]]:
    """Read the finished chunks of a sweep directory (without recomputing anything).

    Returns ``(manifest, chunks)`` where ``chunks`` maps chunk index to its outputs: a
    pytree if ``treedef`` is given, else the list of leaves in ``tree_flatten`` order.
    """
    with open(os.path.join(out_dir, MANIFEST)) as f:
        manifest = json.load(f)
    chunks = {}
    for c, entry in sorted(manifest["finished"].items(), key=lambda kv: int(kv[0])):
        path = os.path.join(out_dir, entry["file"])
        if treedef is None:  # a flat list of the stored leaves
            with np.load(path) as z:
                num_leaves = len(z.files)
            chunks[int(c)] = load_tree(path, jax.tree_util.tree_structure([0] * num_leaves))
        else:
            chunks[int(c)] = load_tree(path, treedef)
    return manifest, chunks
