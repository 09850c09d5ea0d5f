"""ICML-20 (Kolobov, Bubeck & Zimmert) Figs. 1-4: MirrorSync, AsyncMirrorSync, AsyncPSGDSync.

*Online Learning for Active Cache Synchronization*, §8 and App. B-C: random
synchronization-bandit instances (K = 100 arms, B = 0.4K, r_min = 0.025, ε = 0.05) with

* polynomial costs c_k(τ) = a_k τ^{p_k} (Table 1: r_max = 3, noise 0.1, scaling 5) --
  Fig. 1 (MirrorSync η = 2.7 vs AsyncMirrorSync η = 1.6, l_upd = 20) and Fig. 2
  (AsyncMirrorSync vs AsyncPSGDSync η = 0.08, l_upd = 20);
* binary-Poisson costs (Table 2: r_max = 6, λ_k ~ U[0.005, 5]) -- Fig. 3 (MirrorSync η = 5
  vs AsyncMirrorSync η = 1.3, l_upd = 8) and Fig. 4 (AsyncMirrorSync vs AsyncPSGDSync
  η = 0.5, l_upd = 40).

Each algorithm runs on the same 150 instances for the simulated time of 240 MirrorSync
rounds (1/r_min = 40 time units each; the asynchronous ones update every l_upd), and the
exact policy cost J(r) (Lemma 1) after every update is averaged over instances.  J* and
J*_ε (the optimum over the restricted set K_ε the learners live in) are computed exactly.
"""
from __future__ import annotations

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxcrawl import sync_bandits as sb

from . import _common
from ._common import claim

ms = importlib.import_module("jaxcrawl.learners")

NAME = "icml20_fig1_4"
DESCRIPTION = ("ICML-20 Figs. 1-4: MirrorSync vs AsyncMirrorSync vs AsyncPSGDSync on polynomial and "
               "binary-Poisson synchronization bandits")
__all__: list[str] = []  # run by `jaxcrawl reproduce` (NAME, DESCRIPTION, run), not imported

FAMILIES = {
    "polynomial": (sb.TABLE1, sb.polynomial_bandit),
    "binary_poisson": (sb.TABLE2, sb.binary_poisson_bandit),
}
LEARNERS = ("mirror_sync", "async_mirror_sync", "async_psgd_sync")
LABELS = {"mirror_sync": "MirrorSync", "async_mirror_sync": "AsyncMirrorSync", "async_psgd_sync": "AsyncPSGDSync"}


def _learner(name, table):
    if name == "mirror_sync":
        return ms.mirror_sync(**table["mirror_sync"]), None
    factory = ms.async_mirror_sync if name == "async_mirror_sync" else ms.async_psgd_sync
    return factory(**table[name]), table[name]["update_interval"]


def _bandits(key, family, start, stop, num_instances):
    table, gen = FAMILIES[family]
    keys = jax.random.split(key, num_instances)[start:stop]
    return jax.vmap(lambda k: gen(k, table["num_arms"], dtype=jnp.float32))(keys)


@functools.cache
def _optima_fn(family, unrestricted):
    table, _ = FAMILIES[family]

    @jax.jit
    def go(b):
        j_eps = jax.vmap(lambda x: sb.policy_cost(x.costs, sb.optimal_policy(x, table["exploration"]).x))(b)
        if not unrestricted:
            return j_eps, jnp.full_like(j_eps, jnp.nan)
        j_star = jax.vmap(lambda x: sb.policy_cost(x.costs, sb.optimal_policy(x).x))(b)
        return j_eps, j_star

    return go


def optima_chunk(key, family, start, stop, num_instances, unrestricted=True):
    """J*_ε (and J*, the unrestricted optimum, unless ``unrestricted=False``) of the instances."""
    bandits = _bandits(key, family, start, stop, num_instances)
    j_eps, j_star = _optima_fn(family, unrestricted)(bandits)
    return dict(j_star=np.asarray(j_star), j_eps=np.asarray(j_eps))


@functools.cache
def _learner_fn(family, name, rounds):
    table, _ = FAMILIES[family]
    learner, interval = _learner(name, table)
    steps = ms.num_learner_steps(learner, table["min_rate"], rounds, interval)

    @jax.jit
    def go(k, b):
        j0 = jax.vmap(lambda x: sb.policy_cost(x.costs, learner.init(x).rate))(b)
        _, info = jax.vmap(lambda kk, x: ms.run_learner(kk, learner, x, steps))(k, b)
        return j0, info.policy_cost, info.time[0]

    return go


def learner_chunk(key_inst, key_run, family, name, start, stop, num_instances, rounds):
    """Mean-free results of one learner on instances ``start:stop``: J_0, J after every update."""
    table, _ = FAMILIES[family]
    bandits = _bandits(key_inst, family, start, stop, num_instances)
    keys = jax.random.split(key_run, num_instances)[start:stop]
    j0, cost, t = _learner_fn(family, name, rounds)(keys, bandits)
    return dict(j0=np.asarray(j0), cost=np.asarray(cost), rounds=np.asarray(t) * table["min_rate"])


def _first_below(rounds, gap, threshold):
    hit = np.flatnonzero(gap <= threshold)
    return float(rounds[hit[0]]) if hit.size else float("inf")


def run(ctx):
    # --quick keeps the paper's horizon (the claims are about the whole run, and the scan's
    # length costs nothing to compile) and cuts the instances.
    num_instances = ctx.size(8, 150)
    rounds = 240
    batch = ctx.size(8, 50)
    starts = list(range(0, num_instances, batch))
    chunks = {}
    for family in FAMILIES:
        key_inst = ctx.key("icml20", family, "instances")
        for s in starts:
            e = min(s + batch, num_instances)
            chunks[f"{family}_optima_{s}-{e}_of{num_instances}"] = (
                lambda family=family, s=s, e=e, k=key_inst: optima_chunk(k, family, s, e, num_instances,
                                                                         unrestricted=not ctx.quick))
            for name in LEARNERS:
                key_run = ctx.key("icml20", family, name)
                chunks[f"{family}_{name}_{s}-{e}_of{num_instances}_r{rounds}"] = (
                    lambda family=family, name=name, s=s, e=e, ki=key_inst, kr=key_run: learner_chunk(
                        ki, kr, family, name, s, e, num_instances, rounds))
    done = ctx.run_chunks(f"{num_instances} instances x 3 learners x 2 cost families", chunks)

    curves, summary = {}, {}
    for family in FAMILIES:
        opt = [done[f"{family}_optima_{s}-{min(s + batch, num_instances)}_of{num_instances}"] for s in starts]
        j_star = np.concatenate([o["j_star"] for o in opt])
        j_eps = np.concatenate([o["j_eps"] for o in opt])
        curves[family] = {}
        summary[family] = dict(mean_j_star=float(j_star.mean()), mean_j_star_eps=float(j_eps.mean()))
        for name in LEARNERS:
            parts = [done[f"{family}_{name}_{s}-{min(s + batch, num_instances)}_of{num_instances}_r{rounds}"]
                     for s in starts]
            j0 = np.concatenate([p["j0"] for p in parts]).astype(np.float64)
            cost = np.concatenate([p["cost"] for p in parts]).astype(np.float64)
            r = parts[0]["rounds"].astype(np.float64)
            gap0 = float(np.mean(j0 - j_eps))
            gap = (cost.mean(0) - j_eps.mean()) / gap0
            curves[family][name] = dict(rounds=r, mean_cost=cost.mean(0), gap=gap,
                                        mean_j0=float(j0.mean()))
            summary[family][name] = dict(
                mean_j0=float(j0.mean()), final_mean_cost=float(cost[:, -1].mean()),
                final_gap=float(gap[-1]), mean_gap_over_horizon=float(np.mean(gap)),
                rounds_to_half_gap=_first_below(r, gap, 0.5),
                rounds_to_quarter_gap=_first_below(r, gap, 0.25),
                updates=int(cost.shape[1]))

    # ------------------------------------------------------------------------ claims
    claims = []
    for family in FAMILIES:
        s = summary[family]
        ms_, ams, psgd = (s[n] for n in LEARNERS)
        fig_a, fig_b = ("1", "2") if family == "polynomial" else ("3", "4")
        # a learner "converges": its normalised suboptimality shrinks by more than half
        claims.append(claim(
            f"{family}_all_learners_improve",
            all(s[n]["final_gap"] < 0.5 for n in LEARNERS),
            description=f"{family}: every learner ends with (J - J*_ε)/(J_0 - J*_ε) < 0.5 (final: "
                        + ", ".join(f"{LABELS[n]} {s[n]['final_gap']:.3f}" for n in LEARNERS) + ")",
            tolerance="normalised final suboptimality < 0.5",
            paper=f"Figs. {fig_a}-{fig_b}: all three algorithms converge toward the optimum"))
        diff_mean = abs(ms_["mean_gap_over_horizon"] - ams["mean_gap_over_horizon"])
        diff_final = abs(ms_["final_gap"] - ams["final_gap"])
        claims.append(claim(
            f"{family}_mirror_sync_matches_async",
            diff_mean <= 0.1 and diff_final <= 0.1,
            description=(f"{family} (Fig. {fig_a}): MirrorSync and AsyncMirrorSync converge alike: normalised "
                         f"suboptimality averaged over the horizon {ms_['mean_gap_over_horizon']:.3f} vs "
                         f"{ams['mean_gap_over_horizon']:.3f}, final {ms_['final_gap']:.3f} vs {ams['final_gap']:.3f}; "
                         f"rounds to halve it {ms_['rounds_to_half_gap']:.0f} vs {ams['rounds_to_half_gap']:.0f}"),
            tolerance="|difference| <= 0.1 in both the horizon average and the final normalised suboptimality",
            paper=f"Fig. {fig_a}: the two algorithms exhibit nearly identical convergence behavior"))
        claims.append(claim(
            f"{family}_async_mirror_faster_than_psgd",
            ams["mean_gap_over_horizon"] < psgd["mean_gap_over_horizon"]
            and ams["rounds_to_half_gap"] <= psgd["rounds_to_half_gap"],
            description=(f"{family} (Fig. {fig_b}): AsyncMirrorSync finds good policies sooner than AsyncPSGDSync: "
                         f"horizon-averaged normalised suboptimality {ams['mean_gap_over_horizon']:.3f} < "
                         f"{psgd['mean_gap_over_horizon']:.3f}; rounds to halve it {ams['rounds_to_half_gap']:.0f} "
                         f"<= {psgd['rounds_to_half_gap']:.0f}"),
            tolerance="strict on the horizon average; <= on rounds to halve (inf if never)",
            paper=f"Fig. {fig_b}: AsyncMirrorSync discovers good policies faster, as MirrorSync's theory predicts"))
        late = curves[family]
        g_ams, g_psgd = late["async_mirror_sync"]["gap"], late["async_psgd_sync"]["gap"]
        lead = g_psgd - np.interp(late["async_psgd_sync"]["rounds"], late["async_mirror_sync"]["rounds"], g_ams)
        claims.append(claim(
            f"{family}_psgd_catches_up",
            lead[-1] <= 0.5 * np.max(lead) and abs(psgd["final_gap"] - ams["final_gap"]) <= 0.15,
            description=(f"{family}: AsyncPSGDSync's lag behind AsyncMirrorSync shrinks from its peak "
                         f"{np.max(lead):.3f} to {lead[-1]:.3f} and the final suboptimalities are close "
                         f"({ams['final_gap']:.3f} vs {psgd['final_gap']:.3f})"),
            tolerance="final lag <= half the peak lag, |final difference| <= 0.15",
            paper=f"Fig. {fig_b}: ASYNCMIRRORSYNC and ASYNCPSGDSYNC eventually converge to similar-quality policies"))
    adv = {f: summary[f]["async_psgd_sync"]["mean_gap_over_horizon"] / summary[f]["async_mirror_sync"]["mean_gap_over_horizon"]
           for f in FAMILIES}
    claims.append(claim(
        "advantage_smaller_on_poisson", adv["binary_poisson"] < adv["polynomial"],
        description=(f"the horizon-averaged suboptimality ratio AsyncPSGDSync / AsyncMirrorSync is "
                     f"{adv['polynomial']:.2f} on polynomial costs and {adv['binary_poisson']:.2f} on "
                     f"binary-Poisson costs"),
        tolerance="ratio(binary-Poisson) < ratio(polynomial)",
        paper="App. C: the advantage of AsyncMirrorSync over AsyncPSGDSync is less pronounced than in the "
              "first experiment",
        ratios=adv))

    # ------------------------------------------------------------------------ figure
    fig, axes = _common.new_figure(2, 2, width=5.0, height=3.5,
                                   title=f"ICML-20 Figs. 1-4 — mean policy cost J over {num_instances} instances "
                                         f"(K = 100, ε = 0.05)")
    panels = [("polynomial", ("mirror_sync", "async_mirror_sync"), "Fig. 1: polynomial costs"),
              ("polynomial", ("async_mirror_sync", "async_psgd_sync"), "Fig. 2: polynomial costs"),
              ("binary_poisson", ("mirror_sync", "async_mirror_sync"), "Fig. 3: binary-Poisson costs"),
              ("binary_poisson", ("async_mirror_sync", "async_psgd_sync"), "Fig. 4: binary-Poisson costs")]
    for ax, (family, pair, title) in zip(axes.ravel(), panels):
        for name in pair:
            c = curves[family][name]
            x = np.concatenate([[0.0], c["rounds"]])
            y = np.concatenate([[c["mean_j0"]], c["mean_cost"]])
            ax.plot(x, y, label=LABELS[name], color=_common.PALETTE[LABELS[name]], lw=1.3)
        ax.axhline(summary[family]["mean_j_star_eps"], color="black", ls="--", lw=0.9, label=r"$J^*_\varepsilon$ (optimum in $\mathcal{K}_\varepsilon$)")
        if np.isfinite(summary[family]["mean_j_star"]):
            ax.axhline(summary[family]["mean_j_star"], color="gray", ls=":", lw=0.9, label=r"$J^*$ (unrestricted optimum)")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(r"MirrorSync-round equivalents (1 round = $1/r_{min}$ = 40 time units)")
        ax.set_ylabel(r"policy cost $J(r)$ (mean)")
        ax.set_xlim(0, rounds)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    ctx.savefig(fig)

    return dict(
        params=dict(num_instances=num_instances, horizon_rounds=rounds, instances_per_chunk=batch,
                    table1=sb.TABLE1, table2=sb.TABLE2, dtype="float32"),
        results=dict(summary=summary,
                     curves={f: {n: dict(rounds=c["rounds"], mean_cost=c["mean_cost"], gap=c["gap"])
                                 for n, c in v.items()} for f, v in curves.items()}),
        claims=claims,
    )
