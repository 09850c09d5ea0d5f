"""Run with XLA_FLAGS=--xla_force_host_platform_device_count=8: sharded == single-device results.

Prints one JSON object with the maximum relative differences; exits non-zero on failure.
"""
import json
import sys

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxcrawl  # noqa: E402
from jaxcrawl import estimators  # noqa: E402
from jaxcrawl.learners import async_mirror_sync, run_learner  # noqa: E402
from jaxcrawl.parallel import page_mesh, shard_leading, shard_pages  # noqa: E402
from jaxcrawl.sync_bandits import polynomial_bandit  # noqa: E402

assert len(jax.devices()) == 8, jax.devices()
mesh = page_mesh()
single = jax.devices()[0]
out = {}


def rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


problem = jaxcrawl.synthetic(jax.random.key(0), 8 * 5000, dtype=jnp.float64)
local = jax.device_put(problem, single)
sharded = shard_pages(problem, mesh)
for name, solver in [("lambda_crawl", jaxcrawl.lambda_crawl), ("lambda_crawl_approx", jaxcrawl.lambda_crawl_approx),
                     ("binary_lambda_crawl", lambda p: jaxcrawl.binary_lambda_crawl(p, 0.4))]:
    a = jax.jit(solver)(local)
    b = jax.jit(solver)(sharded)
    spec = b.rate.sharding.spec
    assert tuple(spec) == ("pages",), (name, spec)
    assert len(b.rate.sharding.device_set) == 8
    out[name] = max(rel(b.rate, a.rate), rel(b.dual, a.dual))

# host caps and revisit bounds: the same solve on sharded arrays
n = problem.num_pages
host = (np.arange(n) % 7 - 1).astype(np.int32)
free = np.asarray(jaxcrawl.lambda_crawl(problem).rate)
cap = 0.5 * np.bincount(host[host >= 0], weights=free[host >= 0], minlength=6)
lower = np.where((np.arange(n) % 11 == 0) & (np.asarray(problem.complete) == 0) & (host < 0), 1.5 * free, 0.0)
upper = np.where((np.arange(n) % 13 == 0) & (lower == 0), 0.5 * free, np.inf)  # never below a floor


def capped(p, lo, hi):
    return jaxcrawl.solve(p, "harmonic", caps=jaxcrawl.HostCaps(host, cap), bounds=(lo, hi))


a_ = jax.jit(capped)(local, *jax.device_put((lower, upper), single))
b_ = jax.jit(capped)(sharded, *shard_pages((jnp.asarray(lower), jnp.asarray(upper)), mesh))
assert bool(a_.converged) and bool(b_.converged) and np.any(np.asarray(a_.host_dual) > 0), (a_.converged, b_.converged, a_.host_dual, a_.residual, a_.num_steps)
out["capped_bounded"] = max(rel(b_.rate, a_.rate), rel(b_.dual, a_.dual))

# estimators: histories with pages on the leading axis
rng = np.random.default_rng(0)
rates = rng.lognormal(-1, 1, 8 * 1000)
w = rng.exponential(1.0, (8 * 1000, 30))
changed = rng.random(w.shape) < -np.expm1(-rates[:, None] * w)
a = estimators.mle(jax.device_put(jnp.asarray(w), single), jax.device_put(jnp.asarray(changed), single))
hist = shard_leading((jnp.asarray(w), jnp.asarray(changed)), mesh)
b = estimators.mle(*hist)
assert len(b.sharding.device_set) == 8
out["mle"] = rel(b, a)

# one learner sweep: 8 instances x AsyncMirrorSync, instances sharded across devices
keys = jax.random.split(jax.random.key(1), 8)
bandits = jax.vmap(lambda k: polynomial_bandit(k, 20))(keys)
learner = async_mirror_sync()
sweep = jax.jit(jax.vmap(lambda k, b: run_learner(k, learner, b, 30)[1]))
a = sweep(jax.device_put(keys, single), jax.device_put(bandits, single))
b = sweep(*shard_leading((keys, bandits), mesh))
leaves_a = jax.tree_util.tree_leaves(a)
leaves_b = jax.tree_util.tree_leaves(b)
out["async_mirror_sync_sweep"] = max(rel(x, y) for x, y in zip(leaves_b, leaves_a) if jnp.issubdtype(x.dtype, jnp.floating))

print(json.dumps(out))
bad = {k: v for k, v in out.items() if not v <= 1e-9}
sys.exit(1 if bad else 0)
