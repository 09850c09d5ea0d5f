"""Pages grouped by host: dense host indices, caps merged from two sources, the data set's
host constraints, and the host name of a URL page id."""
from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from jax.typing import ArrayLike

from .fileio import open_read


def url_host(page_id: object) -> str | None:
    """The lower-cased host name of a URL page id, or None when it is not a URL;
    ``ValueError`` naming the page when ``urllib.parse.urlsplit`` refuses it (e.g. an
    unclosed IPv6 bracket)."""
    text = str(page_id)
    if "://" not in text:
        return None
    try:
        host = urllib.parse.urlsplit(text).hostname
    except ValueError as err:
        raise ValueError(f"page {text!r} is not a valid URL ({err})") from None
    return host.lower() if host else None


def caps_pages_path(path: str | os.PathLike) -> str | None:
    """The page -> host mapping a host-caps CSV names in a ``# pages: FILE`` comment before
    its header (relative to the caps file's directory), or None."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: {'is a directory' if os.path.isdir(path) else 'no such file'} "
                         "(expected a host caps file host_id,cap)")
    found = None
    with open_read(path, text=True) as fh:
        for line in fh:
            text = line.strip()
            if not text:
                continue
            if not text.startswith("#"):
                break  # the header: comments come before it (after it, '#...' is data, e.g. an id)
            key, sep, value = text[1:].partition(":")
            if sep and key.strip().lower() == "pages" and value.strip():
                value = value.strip()
                found = value if os.path.isabs(value) else os.path.join(os.path.dirname(os.path.abspath(path)), value)
    return found


def host_index(page_host: Sequence[str | None], host_ids: ArrayLike, host_caps: ArrayLike, *,
               all_hosts: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Dense host indices of the pages and the caps they index.

    Args:
      page_host: ``(n,)`` each page's host id (string), or None / "" for no host.
      host_ids, host_caps: the hosts and their caps (``inf``: uncapped).
      all_hosts: index every finite-cap host in the order given (the same indices on every
        process of a job, whatever pages it holds); default: only the hosts that have
        pages, in order of their first page.

    Returns:
      ``(host_id, host_cap)``: ``(n,)`` int32 index into ``host_cap`` (``-1``: the page's
      host has no cap, or an infinite one) and the float64 caps.
    """
    pairs = [(str(h), float(c)) for h, c in zip(np.asarray(host_ids).tolist(), np.asarray(host_caps).tolist())]
    cap_of = dict(pairs)
    used: dict[str, int] = {}
    if all_hosts:
        for h, c in pairs:
            if np.isfinite(c):
                used.setdefault(h, len(used))
    idx = np.full(len(page_host), -1, np.int32)
    for i, h in enumerate(page_host):
        if h is None or h == "":
            continue
        h = str(h)
        if h not in cap_of or not np.isfinite(cap_of[h]):
            continue
        idx[i] = used.setdefault(h, len(used))
    caps = np.asarray([cap_of[h] for h in used], np.float64)
    return idx, caps


def host_delays(page_host: Sequence[str | None], hosts: ArrayLike,
                delays: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense host indices of the pages whose host has a crawl delay.

    Returns:
      ``(host_index, delay, names)``: ``(n,)`` int32 (``-1``: no delay known), ``(H,)``
      float64 seconds and the ``(H,)`` host names.
    """
    delay_of = {str(h).lower(): float(d) for h, d in zip(np.asarray(hosts).tolist(), np.asarray(delays).tolist())}
    used: dict[str, int] = {}
    idx = np.full(len(page_host), -1, np.int32)
    for i, h in enumerate(page_host):
        if h is None:
            continue
        h = h.lower()
        if h in delay_of:
            idx[i] = used.setdefault(h, len(used))
    names = np.asarray(list(used), object)
    return idx, np.asarray([delay_of[h] for h in used], np.float64), names


def hosts_from_dataset(host_id: ArrayLike, host_constrained: ArrayLike,
                       cap: float | Mapping[int, float] | Callable[[np.ndarray, np.ndarray], ArrayLike],
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host constraints from the NeurIPS-19 data set's host table (``Is_constrained``;
    :class:`jaxcrawl.io.CrawlDataset` fields ``host_id`` and ``host_constrained``), which
    gives no cap values, so the caller supplies them.

    Args:
      host_id: ``(n,)`` integer Host_ID per page (-1 unknown).
      host_constrained: ``(n,)`` bool per page.
      cap: a number (the same cap for every constrained host), a dict
        ``{Host_ID: cap}``, or a callable ``(host_ids, pages_per_host) -> caps``.

    Returns:
      ``(host_index, host_cap, host_ids)``: ``(n,)`` int32 dense index (-1 for pages of
      unconstrained or unknown hosts), ``(H,)`` caps and the ``(H,)`` Host_IDs they belong to.
    """
    hid = np.asarray(host_id)
    con = np.asarray(host_constrained, bool)
    if hid.shape != con.shape:
        raise ValueError("host_id and host_constrained must have the same shape")
    sel = con & (hid >= 0)
    ids, inv, counts = np.unique(hid[sel], return_inverse=True, return_counts=True)
    idx = np.full(hid.shape, -1, np.int32)
    idx[sel] = inv.reshape(-1).astype(np.int32)
    if callable(cap):
        caps = np.asarray(cap(ids, counts), np.float64)
    elif isinstance(cap, Mapping):
        missing = [h for h in ids if h not in cap]
        if missing:
            raise ValueError(f"cap: no cap given for constrained host {missing[0]}")
        caps = np.asarray([cap[h] for h in ids], np.float64)
    else:
        caps = np.full(ids.shape, float(cap))
    if caps.shape != ids.shape:
        raise ValueError(f"cap must give one cap per constrained host ({ids.size}); got shape {caps.shape}")
    if np.any(np.isnan(caps)) or np.any(caps <= 0):
        raise ValueError("cap must be > 0 for every constrained host")
    return idx, caps, ids


def merge_host_caps(index_a: ArrayLike, cap_a: ArrayLike, index_b: ArrayLike, cap_b: ArrayLike, *,
                    page_id: ArrayLike | None = None, what: tuple[str, str] = ("--host-caps", "crawl delays"),
                    names: tuple[ArrayLike | None, ArrayLike | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One set of host caps from two that group the pages the same way: each host's cap is
    the smaller of its two (e.g. a caps file's cap and ``1 / crawl-delay``).

    ``index_a``/``index_b`` are ``(n,)`` host indices (``-1``: no host in that set) into
    ``cap_a``/``cap_b``.  A page may have a host in one set only (its cap is that one).  The
    two sets must not cut each other's hosts: a host of one set whose pages lie in two hosts
    of the other (or partly in none) would be two nested constraints, which one cap per page
    cannot express -- ``ValueError`` naming the host (``names``: each set's host names) and
    a page of each part.

    Returns:
      ``(host_index, host_cap)``: ``(n,)`` int32 dense indices (``-1``: uncapped) and float64 caps.
    """
    a = np.asarray(index_a, np.int64)
    b = np.asarray(index_b, np.int64)
    ca, cb = np.asarray(cap_a, np.float64), np.asarray(cap_b, np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"host indices must be two (n,) arrays of one shape; got {a.shape} and {b.shape}")
    ids = np.arange(a.size) if page_id is None else np.asarray(page_id)
    some = (a >= 0) | (b >= 0)
    pair = np.stack([a[some], b[some]], axis=1)
    uniq, first = np.unique(pair, axis=0, return_index=True)
    rows = np.flatnonzero(some)
    for col, (this, other) in ((0, what), (1, what[::-1])):
        keys, counts = np.unique(uniq[:, col], return_counts=True)
        split = keys[(counts > 1) & (keys >= 0)]
        if split.size:
            h = split[0]
            parts = uniq[uniq[:, col] == h]
            pages = [ids[rows[first[np.flatnonzero((uniq == q).all(axis=1))[0]]]] for q in parts[:2]]
            pages = [p.item() if hasattr(p, "item") else p for p in pages]
            host = (f"#{int(h)}" if names is None or names[col] is None
                    else repr(str(np.asarray(names[col], object)[h])))
            raise ValueError(f"{this} and {other} group the pages differently: host {host} of {this} has pages "
                             f"in {len(parts)} groups of {other} (e.g. pages {pages[0]!r} and {pages[1]!r}); "
                             "map pages to hosts the same way for both (one --hosts file or URL page ids)")
    inf = np.inf
    cap = np.minimum(np.where(uniq[:, 0] >= 0, ca[np.maximum(uniq[:, 0], 0)] if ca.size else inf, inf),
                     np.where(uniq[:, 1] >= 0, cb[np.maximum(uniq[:, 1], 0)] if cb.size else inf, inf))
    index = np.full(a.size, -1, np.int32)
    # each page's group: the row of its (a, b) pair among the unique pairs
    index[rows] = np.unique(pair, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int32)
    return index, cap
