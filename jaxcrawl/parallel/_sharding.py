"""Pages and sweeps sharded over the devices of a ``jax.sharding.Mesh``.

Every solve is a fixed sequence of elementwise maps and global sums over the pages, so it
partitions over a mesh with no code change: put the page arrays on the mesh
(:func:`shard_pages`) and call the same function; XLA turns each pass's sum into one
all-reduce.  Sweeps shard their leading (seed / instance) axis (:func:`shard_leading`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def page_mesh(devices: Sequence | None = None, axis_name: str = "pages") -> Mesh:
    """A one-dimensional mesh over ``devices`` (default: all devices of all processes)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (axis_name,))


def _check_divisible(n, size, what):
    if n % size:
        raise ValueError(
            f"{what}: the sharded axis has length {n}, which is not a multiple of the mesh size {size}; "
            f"pad it to a multiple of {size} (e.g. pages with a tiny importance) or use a mesh of a divisor"
        )


def _shard(tree, mesh: Mesh, axis_name: str | None, axis: int, what: str):
    """Put every array of ``tree`` on ``mesh`` with array axis ``axis`` sharded (scalars replicated)."""
    axis_name = mesh.axis_names[0] if axis_name is None else axis_name
    size = mesh.shape[axis_name]

    def put(x):
        x = jnp.asarray(x)
        if x.ndim == 0:
            return jax.device_put(x, NamedSharding(mesh, PartitionSpec()))
        _check_divisible(x.shape[axis], size, what)
        spec = [None] * x.ndim
        spec[axis] = axis_name
        return jax.device_put(x, NamedSharding(mesh, PartitionSpec(*spec)))

    return jax.tree_util.tree_map(put, tree)


def shard_pages(tree: Any, mesh: Mesh, axis_name: str | None = None) -> Any:
    """Place every array of ``tree`` with its last (pages) axis sharded over ``mesh``.

    Scalars (e.g. the bandwidth) are replicated.  Works on a :class:`CrawlProblem`, a
    :class:`Policy`, any pytree whose arrays end with the pages axis.  The page count
    must be a multiple of the mesh size (``ValueError`` otherwise).
    """
    return _shard(tree, mesh, axis_name, -1, "shard_pages")


def shard_leading(tree: Any, mesh: Mesh, axis_name: str | None = None) -> Any:
    """Place every array of ``tree`` with its first axis sharded: seeds, instances,
    hyperparameters of a sweep, or the pages axis of padded histories ``(pages, k)``."""
    return _shard(tree, mesh, axis_name, 0, "shard_leading")
