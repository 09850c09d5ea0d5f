"""Per-host politeness caps (``jaxcrawl.solve(..., caps=jaxcrawl.HostCaps(host_id, cap))``):
feasibility to float precision, KKT, reduction to the unconstrained solvers, a brute-force
active-set reference, envelope derivatives, vmap/jit, the caps files and
`jaxcrawl solve --host-caps`."""
import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcrawl
from jaxcrawl import CrawlProblem
from jaxcrawl._src.hostmap import hosts_from_dataset
from jaxcrawl.cli import main
from jaxcrawl.io import read_host_caps

from helpers import host_capped
from reference import bisect_dual, harmonic_incomplete_rate

N, H = 120, 6  # one shape for most tests (one compilation per objective and dtype)


def make_instance(seed, n=N, num_hosts=H, complete_fraction=0.15, bw_frac=0.3, dtype=np.float64,
                  tight=None, objective="harmonic", epsilon=0.0):
    """Random pages on random hosts (some pages host-less).  Caps are multiples of the
    unconstrained optimum's host totals: by default 0.3-0.9 for even hosts (they bind) and
    2.5-4 for odd ones (they do not); with ``tight=(lo, hi)`` uniform in [lo, hi]."""
    rng = np.random.default_rng(seed)
    mu = rng.lognormal(1.0, 1.5, n)
    lam = rng.lognormal(-0.5, 1.0, n)
    comp = rng.random(n) < complete_fraction
    host = rng.integers(0, num_hosts, n)
    host[rng.random(n) < 0.2] = -1
    p = CrawlProblem(mu.astype(dtype), lam.astype(dtype), bw_frac * n, comp)
    free = (jaxcrawl.lambda_crawl(p) if objective == "harmonic"
            else jaxcrawl.binary_lambda_crawl(p, epsilon))
    x = np.asarray(free.rate, np.float64)
    tot = np.bincount(host[host >= 0], weights=x[host >= 0], minlength=num_hosts)
    if tight is None:
        factor = np.where(np.arange(num_hosts) % 2 == 0, rng.uniform(0.3, 0.9, num_hosts),
                          rng.uniform(2.5, 4.0, num_hosts))
    else:
        factor = rng.uniform(*tight, num_hosts)
    cap = tot * factor
    if objective != "harmonic":  # keep caps above the BLC-epsilon floors
        floors = np.bincount(host[host >= 0], minlength=num_hosts) * epsilon * bw_frac
        cap = np.maximum(cap, 1.05 * floors + 1e-3)
    return p, host.astype(np.int32), cap.astype(dtype), (mu, lam, comp)


def host_totals(x, host, num_hosts):
    x = np.asarray(x, np.float64)
    return np.bincount(host[host >= 0], weights=x[host >= 0], minlength=num_hosts)


def harmonic_marginal(x, mu, lam, comp):
    return np.where(comp, mu / x, mu * lam / (x * (x + lam)))


def harmonic_utility(x, mu, lam, comp):
    return np.sum(np.where(comp, mu * np.log(np.minimum(x / lam, 1.0)), mu * np.log(x / (lam + x))))


# ----------------------------------------------------------------- feasibility and KKT
@pytest.mark.x64
@pytest.mark.parametrize("seed", range(3))
def test_caps_and_budget_met_and_kkt_harmonic(seed):
    p, host, cap, (mu, lam, comp) = make_instance(seed)
    sol = host_capped(p, host, cap)
    x = np.asarray(sol.policy.rate)
    R = float(p.bandwidth)
    S = host_totals(x, host, H)
    np.testing.assert_allclose(x.sum(), R, rtol=1e-13)
    assert np.all(S <= cap * (1 + 1e-13))
    np.testing.assert_allclose(np.asarray(sol.host_rate), S, rtol=1e-12)
    kappa = np.asarray(sol.host_dual)
    nu = float(sol.policy.dual)
    binding = kappa > 0
    assert binding.any() and (~binding).any()  # the instance exercises both cases
    assert np.all(kappa >= 0)
    np.testing.assert_allclose(S[binding], cap[binding], rtol=1e-13)  # complementary slackness
    # stationarity: u_i'(x_i) = nu + kappa_h(i) on free pages, >= on pages at their upper bound
    d = nu + np.where(host >= 0, kappa[np.maximum(host, 0)], 0.0)
    m = harmonic_marginal(x, mu, lam, comp)
    at_hi = comp & (x >= lam * (1 - 1e-12))
    assert at_hi.any()
    np.testing.assert_allclose(m[~at_hi], d[~at_hi], rtol=1e-10)
    assert np.all(m[at_hi] >= d[at_hi] * (1 - 1e-10))
    assert np.all(np.asarray(sol.binding) == binding)
    assert np.all(np.asarray(sol.policy.prob)[comp] <= 1 + 1e-12)


@pytest.mark.x64
@pytest.mark.parametrize("epsilon", [0.0, 0.4])
def test_caps_and_budget_met_and_kkt_binary(epsilon):
    p, host, cap, (mu, lam, _) = make_instance(4, objective="binary", epsilon=epsilon)
    sol = host_capped(p, host, cap, jaxcrawl.binary(epsilon))
    x = np.asarray(sol.policy.rate)
    S = host_totals(x, host, H)
    np.testing.assert_allclose(x.sum(), float(p.bandwidth), rtol=1e-13)
    assert np.all(S <= cap * (1 + 1e-13))
    kappa, nu = np.asarray(sol.host_dual), float(sol.policy.dual)
    assert (kappa > 0).any()
    np.testing.assert_allclose(S[kappa > 0], cap[kappa > 0], rtol=1e-13)
    floor = epsilon * float(p.bandwidth) / N
    d = nu + np.where(host >= 0, kappa[np.maximum(host, 0)], 0.0)
    m = mu * lam / (x + lam) ** 2
    at_lo = x <= floor * (1 + 1e-12)
    np.testing.assert_allclose(m[~at_lo], d[~at_lo], rtol=1e-10)
    assert np.all(m[at_lo] <= d[at_lo] * (1 + 1e-10))
    assert np.all(x >= floor * (1 - 1e-12))
    assert not np.asarray(sol.policy.on_signal).any()


@pytest.mark.long
def test_float32_caps_and_budget_to_float_precision():
    p, host, cap, (mu, lam, comp) = make_instance(5, dtype=np.float32)
    sol = host_capped(p, host, cap)
    x = np.asarray(sol.policy.rate)
    assert x.dtype == np.float32
    eps = np.finfo(np.float32).eps
    S = host_totals(x, host, H)
    np.testing.assert_allclose(x.astype(np.float64).sum(), float(p.bandwidth), rtol=16 * eps)
    assert np.all(S <= cap.astype(np.float64) * (1 + 16 * eps))
    ref = host_capped(make_instance(5)[0], host, cap.astype(np.float64))
    np.testing.assert_allclose(x, np.asarray(ref.policy.rate), rtol=2e-4)


# ----------------------------------------------------------------- reduces to the unconstrained solver
@pytest.mark.x64
@pytest.mark.parametrize("how", ["inf caps", "no hosts", "slack caps"])
def test_without_binding_caps_equals_lambda_crawl(how):
    p, host, cap, _ = make_instance(6)
    free = jaxcrawl.lambda_crawl(p)
    if how == "inf caps":
        cap = np.full(H, np.inf)
    elif how == "no hosts":
        host = np.full(N, -1, np.int32)
    else:
        cap = host_totals(free.rate, host, H) * 1.001
    sol = host_capped(p, host, cap)
    np.testing.assert_allclose(np.asarray(sol.policy.rate), np.asarray(free.rate), rtol=1e-11)
    np.testing.assert_allclose(float(sol.policy.dual), float(free.dual), rtol=1e-11)
    np.testing.assert_array_equal(np.asarray(sol.policy.prob) > 0, np.asarray(free.prob) > 0)
    np.testing.assert_allclose(np.asarray(sol.policy.prob), np.asarray(free.prob), rtol=1e-11)
    assert np.all(np.asarray(sol.host_dual) == 0)


@pytest.mark.x64
@pytest.mark.parametrize("epsilon", [0.0, 0.4])
def test_without_binding_caps_equals_binary_lambda_crawl(epsilon):
    p, host, _, _ = make_instance(6)
    free = jaxcrawl.binary_lambda_crawl(p, epsilon)
    sol = host_capped(p, host, np.full(H, np.inf), jaxcrawl.binary(epsilon))
    np.testing.assert_allclose(np.asarray(sol.policy.rate), np.asarray(free.rate), rtol=1e-11,
                               atol=1e-14)
    np.testing.assert_allclose(float(sol.policy.dual), float(free.dual), rtol=1e-11)


# ----------------------------------------------------------------- brute-force references
def harmonic_rate_np(nu, mu, lam, comp):
    return np.where(comp, np.minimum(lam, mu / nu), harmonic_incomplete_rate(nu, mu, lam))


def active_set_reference(mu, lam, comp, R, host, cap):
    """Enumerate which host caps bind (2^H cases); in each case solve every binding host
    with its own budget and the rest with the leftover budget by plain bisection, and keep
    the case that satisfies every KKT condition (it is unique: the problem is strictly
    concave)."""
    num_hosts = len(cap)
    found = []
    for bits in itertools.product([False, True], repeat=num_hosts):
        B = np.array(bits)
        if np.any(B & ~np.isfinite(cap)):
            continue
        x = np.zeros_like(mu)
        mus = np.zeros(num_hosts)
        ok = True
        for h in np.flatnonzero(B):
            idx = host == h
            f = lambda v, idx=idx: harmonic_rate_np(v, mu[idx], lam[idx], comp[idx])  # noqa: E731
            mus[h] = bisect_dual(f, cap[h])
            x[idx] = f(mus[h])
            ok &= abs(x[idx].sum() - cap[h]) <= 1e-9 * cap[h]
        rest = ~((host >= 0) & B[np.maximum(host, 0)])
        left = R - cap[B].sum()
        if not ok or left <= 0:
            continue
        g = lambda v: harmonic_rate_np(v, mu[rest], lam[rest], comp[rest])  # noqa: E731
        nu = bisect_dual(g, left)
        x[rest] = g(nu)
        if abs(x[rest].sum() - left) > 1e-9 * left or np.any(mus[B] < nu * (1 - 1e-9)):
            continue
        S = host_totals(x, host, num_hosts)
        if np.any(S[~B] > cap[~B] * (1 + 1e-9)):
            continue
        found.append((x, nu, np.where(B, mus - nu, 0.0)))
    assert len(found) == 1, f"{len(found)} KKT points"
    return found[0]


@pytest.mark.x64
@pytest.mark.parametrize("seed", range(3))
def test_matches_active_set_enumeration(seed):
    p, host, cap, (mu, lam, comp) = make_instance(seed + 10)
    cap[1] = np.inf
    sol = host_capped(p, host, cap)
    x_ref, nu_ref, kappa_ref = active_set_reference(mu, lam, comp, float(p.bandwidth), host, cap)
    np.testing.assert_allclose(np.asarray(sol.policy.rate), x_ref, rtol=1e-9)
    np.testing.assert_allclose(float(sol.policy.dual), nu_ref, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(sol.host_dual), kappa_ref, rtol=1e-8, atol=1e-9 * nu_ref)


def test_beats_every_random_feasible_point():
    """Brute force on a tiny instance: the solution's utility is at least that of 100000
    random feasible allocations (host totals uniform below the caps, split at random inside
    each host, the rest of the budget to the host-less page)."""
    rng = np.random.default_rng(0)
    n, R = 6, 3.0
    mu = rng.lognormal(size=n)
    lam = rng.lognormal(size=n)
    comp = np.zeros(n, bool)
    host = np.array([0, 0, 0, 1, 1, -1], np.int32)
    cap = np.array([0.6, 0.9])
    sol = host_capped(CrawlProblem(mu, lam, R, comp), host, cap)
    best = harmonic_utility(np.asarray(sol.policy.rate), mu, lam, comp)
    m = 100000
    s0 = rng.uniform(0, cap[0], m)
    s1 = rng.uniform(0, cap[1], m)
    feas = np.concatenate([rng.dirichlet(np.ones(3), m) * s0[:, None],
                           rng.dirichlet(np.ones(2), m) * s1[:, None],
                           (R - s0 - s1)[:, None]], axis=1)
    util = np.sum(np.where(comp, 0, mu * np.log(feas / (lam + feas))), axis=1)
    assert best >= util.max()
    # and a local perturbation that keeps feasibility never improves it
    x = np.asarray(sol.policy.rate)
    for _ in range(200):
        i, j = rng.choice(n, 2, replace=False)
        y = x.copy()
        t = 1e-4 * rng.standard_normal()
        y[i] += t
        y[j] -= t
        Sy = host_totals(y, host, 2)
        if np.all(y > 0) and np.all(Sy <= cap + 1e-15):
            assert harmonic_utility(y, mu, lam, comp) <= best + 1e-12


# ----------------------------------------------------------------- derivatives, jit, vmap
@pytest.mark.long
@pytest.mark.x64
def test_envelope_and_implicit_derivatives():
    """Reverse mode through the custom JVP: the envelope theorem for the cost
    (d cost/dR = -nu/n, d cost/dC_h = -kappa_h/n) and a random linear functional of the
    rates against central finite differences (w.r.t. importance, caps and bandwidth)."""
    p, host, cap, _ = make_instance(1)
    sol = host_capped(p, host, cap)
    w = jnp.asarray(np.random.default_rng(0).standard_normal(N))

    def outputs(bw, c, mu):
        q = p.replace(bandwidth=bw, importance=mu)
        sol = host_capped(q, host, c)
        pol = sol.policy
        return jnp.concatenate([jnp.stack([jaxcrawl.harmonic_cost(q, pol), jnp.sum(w * pol.rate),
                                           jnp.sum(pol.rate)]), sol.host_rate])

    args = (p.bandwidth, jnp.asarray(cap), p.importance)
    jac = jax.jacrev(outputs, argnums=(0, 1, 2))(*args)
    np.testing.assert_allclose(float(jac[0][0]), -float(sol.policy.dual) / N, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(jac[1][0]), -np.asarray(sol.host_dual) / N, rtol=1e-9,
                               atol=1e-15)
    rng = np.random.default_rng(1)
    d_bw, d_cap, d_mu = 1.0, rng.standard_normal(H), rng.standard_normal(N)
    h = 1e-6
    plus = outputs(args[0] + h * d_bw, args[1] + h * d_cap, args[2] + h * d_mu)
    minus = outputs(args[0] - h * d_bw, args[1] - h * d_cap, args[2] - h * d_mu)
    fd = (np.asarray(plus) - np.asarray(minus)) / (2 * h)
    lin = (np.asarray(jac[0]) * d_bw + np.asarray(jac[1]) @ d_cap + np.asarray(jac[2]) @ d_mu)
    np.testing.assert_allclose(lin, fd, rtol=1e-5, atol=1e-7 * np.abs(fd).max())
    # the derivatives keep the budget (row 2) and every binding cap (rows 3..)
    kappa = np.asarray(sol.host_dual)
    np.testing.assert_allclose(float(jac[0][2]), 1.0, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(jac[2][2]), 0.0, atol=1e-10)
    dcap = np.asarray(jac[1][3:])  # d host totals / d caps
    bind = kappa > 0
    np.testing.assert_allclose(dcap[np.ix_(bind, bind)], np.eye(bind.sum()), atol=1e-10)
    np.testing.assert_allclose(np.asarray(jac[2][3:])[bind], 0.0, atol=1e-10)


@pytest.mark.x64
def test_jit_and_vmap_match_loop():
    """A batch of problems (vmapped inside), under jit, equals a Python loop of eager solves."""
    insts = [make_instance(s) for s in (20, 21, 22)]
    host = insts[0][1]
    probs = CrawlProblem(np.stack([i[3][0] for i in insts]), np.stack([i[3][1] for i in insts]),
                         np.array([float(i[0].bandwidth) for i in insts]),
                         np.stack([i[3][2] for i in insts]))
    caps = np.stack([i[2] for i in insts])
    batched = jax.jit(lambda pr, c: host_capped(pr, host, c))(probs, caps)
    assert batched.policy.rate.shape == (3, N) and batched.host_dual.shape == (3, H)
    for k in range(3):
        one = host_capped(CrawlProblem(*[np.asarray(a)[k] for a in (
            probs.importance, probs.change_rate, probs.bandwidth, probs.complete)]), host, caps[k])
        np.testing.assert_allclose(np.asarray(batched.policy.rate[k]), np.asarray(one.policy.rate),
                                   rtol=1e-12)
        np.testing.assert_allclose(np.asarray(batched.host_dual[k]), np.asarray(one.host_dual),
                                   rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(batched.host_rate[k]), np.asarray(one.host_rate),
                                   rtol=1e-12)


@pytest.mark.x64
@pytest.mark.parametrize("objective", [pytest.param("uniform", marks=pytest.mark.long),
                                       pytest.param("delay", marks=pytest.mark.slow)])
def test_other_objectives_meet_caps(objective):
    p, host, _, _ = make_instance(2)
    free = (jaxcrawl.accumulated_delay_crawl if objective == "delay"
            else jaxcrawl.uniform_interval_crawl)(p)
    tot = host_totals(free.rate, host, H)
    tighten = np.arange(H) % 2 == 0
    cap = tot * np.where(tighten, np.linspace(0.4, 0.9, H), 3.0)
    sol = host_capped(p, host, cap, objective)
    x = np.asarray(sol.policy.rate)
    np.testing.assert_allclose(x.sum(), float(p.bandwidth), rtol=1e-12)
    S = host_totals(x, host, H)
    assert np.all(S <= cap * (1 + 1e-12))
    kappa = np.asarray(sol.host_dual)
    assert np.all((kappa > 0) == tighten)
    np.testing.assert_allclose(S[tighten], cap[tighten], rtol=1e-12)
    inf_sol = host_capped(p, host, np.full(H, np.inf), objective)
    np.testing.assert_allclose(np.asarray(inf_sol.policy.rate), np.asarray(free.rate), rtol=1e-9)


def test_errors():
    p, host, cap, _ = make_instance(0)
    with pytest.raises(ValueError, match="host_id"):
        host_capped(p, np.full(N, H, np.int32), cap)
    with pytest.raises(ValueError, match="host_id"):
        host_capped(p, host[:-1], cap)
    with pytest.raises(ValueError, match="caps: cap must be > 0"):
        host_capped(p, host, np.where(np.arange(H) == 2, 0.0, cap))
    all_hosted = np.abs(host) % H
    with pytest.raises(ValueError, match="bandwidth"):
        host_capped(p, all_hosted.astype(np.int32), np.full(H, 0.01))
    with pytest.raises(ValueError, match="lower bounds"):
        host_capped(p, host, np.full(H, 1e-3), jaxcrawl.binary(0.4))
    with pytest.raises(ValueError, match="harmonic-approx"):
        host_capped(p, host, cap, "harmonic-approx")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), lo=st.floats(0.05, 1.0), width=st.floats(0.0, 1.5),
       bw_frac=st.floats(0.05, 2.0))
@pytest.mark.x64
def test_property_feasible_kkt_and_monotone(seed, lo, width, bw_frac):
    p, host, cap, (mu, lam, comp) = make_instance(seed, tight=(lo, lo + width), bw_frac=bw_frac)
    try:
        sol = host_capped(p, host, cap)
    except ValueError as err:  # caps too tight for the bandwidth: reported, not solved
        assert "bandwidth" in str(err)
        return
    x = np.asarray(sol.policy.rate)
    assert np.all(x > 0) and np.all(np.isfinite(x))
    np.testing.assert_allclose(x.sum(), float(p.bandwidth), rtol=1e-12)
    S = host_totals(x, host, H)
    assert np.all(S <= cap * (1 + 1e-12))
    kappa, nu = np.asarray(sol.host_dual), float(sol.policy.dual)
    d = nu + np.where(host >= 0, kappa[np.maximum(host, 0)], 0.0)
    m = harmonic_marginal(x, mu, lam, comp)
    at_hi = comp & (x >= lam * (1 - 1e-12))
    np.testing.assert_allclose(m[~at_hi], d[~at_hi], rtol=1e-8)
    # loosening every cap can only help
    looser = host_capped(p, host, cap * 1.5)
    assert (harmonic_utility(np.asarray(looser.policy.rate), mu, lam, comp)
            >= harmonic_utility(x, mu, lam, comp) - 1e-9 * abs(harmonic_utility(x, mu, lam, comp)))


# ----------------------------------------------------------------- files and the CLI
def test_read_host_caps_and_page_hosts_formats_and_errors(tmp_path):
    caps = tmp_path / "caps.csv"
    caps.write_text("# comment\n# pages: hosts.csv\nhost_id,cap\na.com,2.5\n\nb.org,inf\nc.net,1\n")
    (tmp_path / "hosts.csv").write_text("page_id,host_id\np1,a.com\np2,b.org\np3,c.net\np4,a.com\n")
    # the '# pages:' mapping names each page's host; an inf cap or no host is uncapped
    host_id, cap = read_host_caps(str(caps), ["p1", "p2", "p3", "p4", "p5"])
    np.testing.assert_array_equal(host_id, [0, -1, 1, 0, -1])
    np.testing.assert_array_equal(cap, [2.5, 1.0])
    cases = {
        "host,cap\na,1\n": ":1: header",
        "host_id,cap\na,1,2\n": ":2: expected 2 fields",
        "host_id,cap\na,x\n": ":2: cap 'x' is not a number",
        "host_id,cap\na,1\nb,-1\n": ":3: cap must be > 0",
        "host_id,cap\na,1\na,2\n": ":3: duplicate host_id 'a'",
        "host_id,cap\n,1\n": ":2: empty host_id",
        "": "empty file",
    }
    for k, (text, msg) in enumerate(cases.items()):
        f = tmp_path / f"bad{k}.csv"
        f.write_text(text)
        with pytest.raises(ValueError, match=msg.replace("(", r"\(")) as info:
            read_host_caps(str(f), ["https://a/x"])
        assert str(f) in str(info.value)
    for k, (text, msg) in enumerate({
        "page,host\n": ":1: header",
        "page_id,host_id\np1\n": ":2: expected 2 fields",
        "page_id,host_id\np1,a\np1,b\n": ":3: duplicate page_id",
        "page_id,host_id\np1,\n": ":2: empty host_id",
    }.items()):
        f = tmp_path / f"badmap{k}.csv"
        f.write_text(text)
        with pytest.raises(ValueError, match=msg) as info:
            read_host_caps(str(caps), ["p1", "p2"], pages_path=str(f))
        assert str(f) in str(info.value)
    with pytest.raises(ValueError, match="no such file"):
        read_host_caps(str(tmp_path / "missing.csv"), ["p1"])


@pytest.mark.x64
def test_caps_from_caps_file_mapping_and_url_hosts(tmp_path):
    p, host, cap, _ = make_instance(3)
    page_id = np.array([f"https://h{h}.example/page{i}" if h >= 0 else f"https://free{i}.example/"
                        for i, h in enumerate(host)], dtype=object)
    lines = "".join(f"h{h}.example,{float(cap[h])!r}\n" for h in range(H))
    (tmp_path / "caps_url.csv").write_text("host_id,cap\n" + lines)
    direct = host_capped(p, host, cap).policy
    caps = read_host_caps(str(tmp_path / "caps_url.csv"), page_id)
    np.testing.assert_allclose(np.asarray(jaxcrawl.solve(p, "harmonic", caps=caps).rate), np.asarray(direct.rate),
                               rtol=1e-12)
    # explicit mapping file, plain page ids, named by a '# pages:' comment
    ids = np.array([f"p{i}" for i in range(N)], dtype=object)
    (tmp_path / "map.csv").write_text("page_id,host_id\n" + "".join(
        f"p{i},H{h}\n" for i, h in enumerate(host) if h >= 0))
    (tmp_path / "caps.csv").write_text("# pages: map.csv\nhost_id,cap\n" + "".join(
        f"H{h},{float(cap[h])!r}\n" for h in range(H)) + "unused,3\n")
    # a caps row whose host has no page: an error naming file, line and host, or a warning
    with pytest.raises(ValueError, match=rf"caps.csv:{H + 3}: caps row host 'unused' matches no page's host"):
        read_host_caps(str(tmp_path / "caps.csv"), ids)
    with pytest.warns(UserWarning, match=rf"caps.csv:{H + 3}: caps row host 'unused' matches no page's host"):
        caps = read_host_caps(str(tmp_path / "caps.csv"), ids, unmatched="warn")
    np.testing.assert_allclose(np.asarray(jaxcrawl.solve(p, "harmonic", caps=caps).rate), np.asarray(direct.rate),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="no page->host mapping"):
        read_host_caps(str(tmp_path / "caps_url.csv"), ids)
    (tmp_path / "map2.csv").write_text("page_id,host_id\np0,H0\nzzz,H1\n")
    with pytest.raises(ValueError, match="map2.csv:3: page_id 'zzz'"):
        read_host_caps(str(tmp_path / "caps.csv"), ids, pages_path=str(tmp_path / "map2.csv"))


def test_hosts_from_dataset():
    host_id = np.array([10, 10, 11, 12, -1, 12, 11])
    constrained = np.array([1, 1, 0, 1, 0, 1, 0], bool)
    idx, caps, ids = hosts_from_dataset(host_id, constrained, 2.0)
    assert list(ids) == [10, 12] and list(caps) == [2.0, 2.0]
    np.testing.assert_array_equal(idx, [0, 0, -1, 1, -1, 1, -1])
    _, caps, _ = hosts_from_dataset(host_id, constrained, lambda ids, counts: 0.5 * counts)
    np.testing.assert_allclose(caps, [1.0, 1.0])
    _, caps, _ = hosts_from_dataset(host_id, constrained, {10: 3.0, 12: 4.0})
    np.testing.assert_allclose(caps, [3.0, 4.0])
    with pytest.raises(ValueError, match="no cap given"):
        hosts_from_dataset(host_id, constrained, {10: 3.0})


@pytest.mark.x64
def test_cli_solve_with_host_caps(tmp_path, capsys):
    p, host, cap, (mu, lam, comp) = make_instance(8)
    src = tmp_path / "pages.csv"
    src.write_text("page_id,importance,change_rate,complete\n" + "".join(
        f"u{i},{float(mu[i])!r},{float(lam[i])!r},{int(comp[i])}\n" for i in range(N)))
    (tmp_path / "map.csv").write_text("page_id,host_id\n" + "".join(
        f"u{i},host{h}\n" for i, h in enumerate(host) if h >= 0))
    (tmp_path / "caps.csv").write_text("# pages: map.csv\nhost_id,cap\n" + "".join(
        f"host{h},{float(cap[h])!r}\n" for h in range(H)))
    out = tmp_path / "plan.csv"
    R = float(p.bandwidth)
    assert main(["solve", "-i", str(src), "-o", str(out), "--bandwidth", repr(R), "--x64",
                 "--host-caps", str(tmp_path / "caps.csv")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    plan = np.genfromtxt(out, delimiter=",", names=True, dtype=None, encoding=None)
    rate = plan["rate"]
    S = host_totals(rate, host, H)
    assert np.all(S <= cap * (1 + 1e-9))
    np.testing.assert_allclose(rate.sum(), R, rtol=1e-9)
    capped = host_capped(p, host, cap)
    ref = capped.policy
    np.testing.assert_allclose(rate, np.asarray(ref.rate), rtol=1e-9)
    np.testing.assert_allclose(summary["dual"], float(ref.dual), rtol=1e-9)
    # the plan explains itself: exactly the hosts at their cap are listed, by name, with their
    # multiplier (KKT-checked above) and the load they would take in the unconstrained plan
    kappa = np.asarray(capped.host_dual)
    binding = np.flatnonzero(S >= cap * (1 - 1e-9))
    assert 0 < binding.size < H and np.all(kappa[binding] > 0)
    free = host_totals(jaxcrawl.solve(p, "harmonic").rate, host, H)
    listed = {h["host"]: h for h in summary["binding_hosts"]}
    assert set(listed) == {f"host{h}" for h in binding} and summary["num_binding_hosts"] == binding.size
    assert [h["held_back"] for h in summary["binding_hosts"]] == sorted(listed[k]["held_back"] for k in listed)[::-1]
    for h in binding:
        e = listed[f"host{h}"]
        np.testing.assert_allclose([e["load"], e["cap"]], [cap[h], cap[h]], rtol=1e-9)
        np.testing.assert_allclose(e["multiplier"], kappa[h], rtol=1e-6)
        np.testing.assert_allclose([e["unconstrained_load"], e["held_back"]], [free[h], free[h] - cap[h]], rtol=1e-7)
        assert e["num_pages"] == np.sum(host == h) and e["crawl_delay"] is None
    np.testing.assert_allclose(summary["bandwidth_held_back_by_host_caps"], np.sum(free[binding] - cap[binding]),
                               rtol=1e-7)
    (tmp_path / "bad.csv").write_text("host_id,cap\nhost0,abc\n")
    assert main(["solve", "-i", str(src), "--host-caps", str(tmp_path / "bad.csv")]) == 2
    assert "bad.csv:2" in capsys.readouterr().err
