"""Plain NumPy references written for the tests (slow, obviously-correct algorithms)."""
import numpy as np


def bisect_dual(x_of_nu, budget, lo=1e-300, hi=1e300, iters=3000):
    """Find nu with sum(x_of_nu(nu)) == budget by plain geometric bisection (x decreasing)."""
    lo, hi = float(lo), float(hi)
    for _ in range(iters):
        mid = np.sqrt(lo * hi)
        if np.sum(x_of_nu(mid)) > budget:
            lo = mid
        else:
            hi = mid
        if hi / lo - 1 < 1e-15:
            break
    return np.sqrt(lo * hi)


def harmonic_incomplete_rate(nu, mu, lam):
    return (-lam + np.sqrt(lam**2 + 4 * mu * lam / nu)) / 2


def lambda_crawl_incomplete_ref(mu, lam, R):
    """NeurIPS-19 Alg. 1 by bisection on the multiplier."""
    nu = bisect_dual(lambda v: harmonic_incomplete_rate(v, mu, lam), R)
    return harmonic_incomplete_rate(nu, mu, lam)


def lambda_crawl_complete_ref(mu, lam, R):
    """NeurIPS-19 Alg. 2, literally: solve the relaxation, fix violators at p = 1, repeat."""
    mu, lam = np.asarray(mu, float), np.asarray(lam, float)
    p = np.zeros_like(mu)
    remaining = np.ones(mu.shape, bool)
    Rrem = float(R)
    while remaining.any():
        p_rel = np.zeros_like(mu)
        p_rel[remaining] = mu[remaining] * Rrem / (lam[remaining] * mu[remaining].sum())
        viol = remaining & (p_rel >= 1)
        if not viol.any():
            p[remaining] = p_rel[remaining]
            break
        p[viol] = 1.0
        Rrem -= lam[viol].sum()
        remaining &= ~viol
    return p * lam


def harmonic_cost_ref(mu, lam, rate, complete):
    inc = mu * np.log((lam + rate) / rate)
    comp = -mu * np.log(np.minimum(rate / lam, 1.0))
    return np.mean(np.where(complete, comp, inc))


def golden_max(f, a, b, iters=200):
    g = (np.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc > fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def clipped_allocation_ref(phi, lower, upper, budget):
    """argmax sum u_i(x_i) s.t. sum x = budget, lower <= x <= upper, for a separable concave
    utility with inverse marginal ``phi(nu)`` (nonincreasing): plain geometric bisection on
    the dual of ``sum clip(phi(nu), lower, upper) = budget`` (the KKT conditions)."""
    def x_of(nu):
        return np.clip(phi(nu), lower, upper)

    nu = bisect_dual(x_of, budget)
    return x_of(nu), nu
