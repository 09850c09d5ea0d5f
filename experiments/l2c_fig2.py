"""Learning to Crawl (Upadhyay et al., AAAI 2020) Fig. 2 / §6.2: phased ε-greedy vs explore-then-commit.

Phased ε-greedy (``jaxcrawl.learners.explore_commit.phased_epsilon_greedy``): phases of
the Lemma 1 length L = log(2 Σζ / tolerance) / ξ_min (``lemma1_phase_length``); the
first phase crawls uniformly (ρ = R/m, Poisson), every later one at
ρ^ε = (1-ε) ρ̂ + ε R/m with ρ̂ Azar et al.'s optimum for the MLE estimates from all
observations so far.  Its expected regret after K phases is eq. 4 per phase
(``phased_regret``).  ETC (``run_etc``) explores with κ^UI and commits; its regret at
the same horizon T = K L is the exact §6.1 expression, for the best τ of a log grid
(τ* tuned per T on the mean over seeds, as the paper's dotted lines: "ETC with optimal
exploration horizon, same bandwidth R and time horizon T").

The paper gives no parameters for Fig. 2.  We use m = 10 pages (--quick) or 50 (full),
R = m/5, importances log-normal (σ = 2), change rates log-uniform in [0.05, 0.5],
tolerance 0.1 in Lemma 1, ε = 0.1, MLE (eq. 6) clipped to [1e-9, 25], and report the
regrets for K = 1 .. num_phases phases (panels a-c of the paper are three horizons; we
draw the whole curve and mark the paper's three regimes).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxcrawl
from jaxcrawl.learners import explore_commit as ec
from jaxcrawl.learners import sweep as sw

import _common
from _common import claim

NAME = "l2c_fig2"
DESCRIPTION = ("Learning to Crawl Fig. 2 (§6.2): phased ε-greedy vs explore-then-commit with the optimal "
               "exploration horizon, regret vs number of phases")

EPSILON = 0.1
TOLERANCE = 0.1
XI_RANGE = (0.05, 0.5)


def instance(seed, m):
    rng = np.random.RandomState(seed)
    zeta = np.exp(rng.normal(0.0, 2.0, m))
    xi = np.exp(rng.uniform(np.log(XI_RANGE[0]), np.log(XI_RANGE[1]), m))
    return jaxcrawl.CrawlProblem(jnp.asarray(zeta, jnp.float32), jnp.asarray(xi, jnp.float32),
                                 jnp.float32(m / 5))


def eps_greedy(key, problem, phase_length, num_phases, seeds):
    s = ec.phased_settings(problem, phase_length, num_phases, epsilon=EPSILON)
    learner = ec.phased_epsilon_greedy(**s)
    params = ec.EpsGreedyParams(epsilon=EPSILON)
    run = jax.jit(jax.vmap(lambda k: sw.run_learner(k, learner, problem, num_phases, params)[1]))
    info = run(jax.random.split(key, seeds))
    regret = np.asarray(ec.phased_regret(problem, info), np.float64)      # (seeds, phases)
    return dict(regret=regret, overflow=int(np.sum(info.overflow)), truncated=int(np.max(info.truncated)),
                simulated_minus_expected=np.asarray(info.simulated_utility - info.utility, np.float64))


def etc(key, problem, horizons, seeds):
    m = problem.change_rate.shape[-1]
    w = m / float(problem.bandwidth)
    max_rounds = int(np.ceil(horizons[-1] / w))
    s = ec.etc_settings(problem, max_rounds * w)
    learner = ec.explore_then_commit(**s)
    rounds = np.unique(np.round(np.logspace(0, np.log10(max_rounds), 40)))
    taus = rounds * w
    taus = taus[taus <= learner.num_windows * learner.config.window * (1 + 1e-9)]
    out, info = jax.jit(jax.vmap(lambda k: ec.run_etc(k, learner, problem, taus, group_ratio=8)))(
        jax.random.split(key, seeds))
    best, best_tau, best_sd = [], [], []
    for t in horizons:
        reg = np.asarray(ec.etc_regret(out, t), np.float64)              # (seeds, taus)
        mean = np.where(taus <= t, reg.mean(0), np.inf)
        i = int(np.argmin(mean))
        best.append(mean[i])
        best_tau.append(taus[i])
        best_sd.append(reg[:, i].std(ddof=1) / np.sqrt(seeds))
    return dict(best=np.array(best), best_tau=np.array(best_tau), best_se=np.array(best_sd),
                overflow=int(np.sum(info.overflow)))


def run(ctx):
    m = ctx.size(10, 50)
    num_phases = ctx.size(12, 60)
    seeds = ctx.size(8, 50)
    problem = instance(ctx.seed, m)
    L = float(ec.lemma1_phase_length(problem.importance, XI_RANGE[0], TOLERANCE))
    horizons = L * np.arange(1, num_phases + 1)
    done = ctx.run_chunks("phased ε-greedy, ETC", {
        f"eps_m{m}_K{num_phases}_s{seeds}": lambda: eps_greedy(ctx.key("eps"), problem, L, num_phases, seeds),
        f"etc_m{m}_K{num_phases}_s{seeds}": lambda: etc(ctx.key("etc"), problem, horizons, seeds),
    })
    eg = done[f"eps_m{m}_K{num_phases}_s{seeds}"]
    et = done[f"etc_m{m}_K{num_phases}_s{seeds}"]
    eg_mean = eg["regret"].mean(0)
    eg_se = eg["regret"].std(0, ddof=1) / np.sqrt(seeds)
    diff = eg_mean - et["best"]
    se = np.hypot(eg_se, et["best_se"])
    k_last = num_phases - 1
    claims = [claim(
        "eps_greedy_beats_best_etc_with_enough_phases", diff[k_last] < -2 * se[k_last], expected=False,
        note=("Not reproduced on our instance (the paper gives no parameters for Fig. 2). The Lemma 1 phase "
              "is long (L = log(2Σζ/0.1)/ξ_min), so the first, uniform phase alone costs more regret than "
              "a well-tuned ETC accumulates over the whole horizon, and with a constant ε = 0.1 every later "
              "phase keeps a constant regret (the ε share of uniform crawling and the MLE's error) of the "
              "same order as ETC's committed policy: the gap does not close within the phases simulated."),
        description=(f"after {num_phases} phases (T = {horizons[-1]:.4g}) phased ε-greedy's mean regret is "
                     f"{eg_mean[-1]:.4g} vs {et['best'][-1]:.4g} for ETC with its best τ = {et['best_tau'][-1]:.4g} "
                     f"({diff[-1] / se[-1]:+.1f} standard errors)"),
        tolerance="ε-greedy below the best ETC by more than 2 standard errors at the last horizon",
        paper="§6.2 / Fig. 2c: with sufficient phases phased ε-greedy obtains lower regret than a well-tuned ETC",
        difference=diff[-1], standard_error=se[-1])]
    claims.append(claim(
        "etc_better_with_few_phases", diff[0] > 2 * se[0],
        description=(f"after 1 phase (T = {horizons[0]:.4g}) ETC's best regret {et['best'][0]:.4g} is below "
                     f"ε-greedy's {eg_mean[0]:.4g} ({diff[0] / se[0]:+.1f} standard errors)"),
        tolerance="ETC below ε-greedy by more than 2 standard errors at the first horizon",
        paper="§6.2 / Fig. 2a-b: phased ε-greedy performs worse than ETC for small time horizons",
        difference=diff[0], standard_error=se[0]))
    overflow = eg["overflow"] + et["overflow"]
    claims.append(claim(
        "exact_simulation", overflow == 0,
        description=f"simulator capacity overflows: {overflow}; ring-buffer truncated pages: {eg['truncated']}",
        tolerance="0 overflows", paper="(validity of this run, not a paper claim)"))
    crossing = int(np.argmax(diff < 0)) + 1 if np.any(diff < 0) else None

    fig, axes = _common.new_figure(1, 2, width=4.8, height=3.7,
                                   title=f"Learning to Crawl Fig. 2 — phased ε-greedy (ε = {EPSILON}) vs ETC, m = {m}, "
                                         f"R = {m / 5:g}, {seeds} seeds")
    k = np.arange(1, num_phases + 1)
    ax = axes[0, 0]
    _common.band(ax, k, eg_mean, eg_mean - 2 * eg_se, eg_mean + 2 * eg_se, label="phased ε-greedy", color="#d62728")
    _common.band(ax, k, et["best"], et["best"] - 2 * et["best_se"], et["best"] + 2 * et["best_se"],
                 label="ETC, best τ for each T", color="#1f77b4", style=":")
    if crossing:
        ax.axvline(crossing, color="gray", lw=0.8, ls="--", label=f"ε-greedy ahead from K = {crossing}")
    ax.set_xlabel(f"number of phases K (T = K × {L:.0f})")
    ax.set_ylabel("expected regret (mean ± 2 SE)")
    ax.set_title("(a) regret at horizon T = K L", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    ax.plot(k, eg_mean / horizons, color="#d62728", label="phased ε-greedy")
    ax.plot(k, et["best"] / horizons, ":", color="#1f77b4", label="ETC, best τ")
    _common.log_axis(ax, "x")
    _common.log_axis(ax, "y")
    ax.set_xlabel("number of phases K")
    ax.set_ylabel("regret / T")
    ax.set_title("(b) time-normalized regret (log-log)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    ctx.savefig(fig)
    return dict(
        params=dict(num_pages=m, bandwidth=m / 5, epsilon=EPSILON, lemma1_tolerance=TOLERANCE,
                    change_rate_range=list(XI_RANGE), importance="log-normal(0, 2)", phase_length=L,
                    num_phases=num_phases, num_seeds=seeds, estimator_eps_greedy="MLE (eq. 6)",
                    estimator_etc="moment matching (eq. 7)", dtype="float32"),
        results=dict(horizons=horizons, eps_greedy_mean_regret=eg_mean, eps_greedy_se=eg_se,
                     etc_best_regret=et["best"], etc_best_tau=et["best_tau"], etc_best_se=et["best_se"],
                     first_phase_count_where_eps_greedy_is_ahead=crossing,
                     eps_greedy_simulated_minus_expected_utility_mean=float(
                         np.mean(eg["simulated_minus_expected"]))),
        claims=claims,
        notes=["The paper states no parameters for Fig. 2: the instance and ε are ours (module docstring)."],
    )


if __name__ == "__main__":
    raise SystemExit(_common.main(__file__))
