"""Host files: per-host crawl-rate caps and the page -> host mapping.

``jaxcrawl solve --host-caps FILE`` reads a caps CSV ``host_id,cap`` (:func:`read_host_caps`)
and maps the problem's pages to hosts (:func:`read_page_hosts`, or the host names of URL
page ids, :func:`url_host`); :func:`load_host_caps` does all of it and returns the dense
arrays :func:`jaxcrawl.politeness.solve_with_host_caps` takes.  :func:`hosts_from_dataset`
builds them from the NeurIPS-19 data set's host table instead.
"""
from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Union

import numpy as np
from jax.typing import ArrayLike

from .tables import Column, Schema, TableError, read_table

__all__ = [
    "HOST_CAPS",
    "PAGE_HOSTS",
    "read_host_caps",
    "read_page_hosts",
    "host_index",
    "merge_host_caps",
    "hosts_from_dataset",
    "url_host",
    "load_host_caps",
    "CRAWL_DELAYS",
    "read_crawl_delays",
    "robots_crawl_delays",
    "page_hosts",
    "host_delays",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Caps CSV ``host_id,cap`` (``#`` comments; ``# pages: FILE`` names the mapping).
HOST_CAPS = Schema(
    "host caps",
    (Column("host_id"), Column("cap", "number", minimum=0.0, exclusive_minimum=True, finite=False)),
    key="host_id", rows="hosts", min_rows=0, comments=True,
)

#: Page -> host mapping CSV ``page_id,host_id``.
PAGE_HOSTS = Schema(
    "page -> host mapping",
    (Column("page_id"), Column("host_id")),
    key="page_id", rows="pages", min_rows=0, comments=True,
)


def _pages_comment(path: str, comments: Sequence[tuple[int, str]]) -> str | None:
    pages_path = None
    for lineno, text in comments:
        key, sep, value = text.partition(":")
        if sep and key.strip().lower() == "pages":
            value = value.strip()
            if not value:
                raise TableError(path, lineno, "'# pages:' needs a file name")
            pages_path = value if os.path.isabs(value) else os.path.join(
                os.path.dirname(os.path.abspath(path)), value)
    return pages_path


def read_host_caps(path: PathLike) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Read a host-caps CSV.

    Format: a header line ``host_id,cap``, then one row per host: ``host_id`` any non-empty
    string (matched against the page->host mapping), ``cap`` the host's maximum total
    crawl rate (crawls per unit time, same unit as the bandwidth), a number > 0 or
    ``inf`` (uncapped).  Blank lines and lines starting with ``#`` are ignored, except a
    comment ``# pages: FILE`` which names the page->host mapping file (relative paths are
    relative to the caps file's directory).

    Returns:
      ``(host_ids, caps, pages_path)``: object array of host ids, float64 caps, and the
      mapping path named in the file or None.

    Raises:
      ValueError: (:class:`~jaxcrawl.io.tables.TableError`) naming the file and line, for a
      missing/wrong header, a wrong number of fields, an empty host id, a cap that is not
      a number > 0, or a duplicate host.
    """
    t = read_table(path, HOST_CAPS)
    return t["host_id"], t["cap"], _pages_comment(t.path, t.comments)


def read_page_hosts(path: PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read a page->host mapping CSV.

    Format: a header line ``page_id,host_id``, then one row per page; both fields are
    non-empty strings.  Blank lines and ``#`` comments are ignored.  A page may appear
    once.

    Returns:
      ``(page_ids, host_ids)`` object arrays.

    Raises:
      ValueError: (:class:`~jaxcrawl.io.tables.TableError`) naming the file and line, for
      a wrong header, a wrong number of fields, an empty field, or a duplicate page.
    """
    t = read_table(path, PAGE_HOSTS)
    return t["page_id"], t["host_id"]


def host_index(page_id: ArrayLike | None, page_host: Sequence[str | None],
               host_ids: ArrayLike, host_caps: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Dense host indices for the pages and the caps they index.

    Args:
      page_id: ``(n,)`` the problem's page ids (unused; kept for the signature).
      page_host: ``(n,)`` each page's host id (string), or None / "" for no host.
      host_ids, host_caps: from :func:`read_host_caps`.

    Returns:
      ``(host_id, host_cap)``: ``(n,)`` int32 index into ``host_cap`` (``-1``: the page's
      host has no cap row, or an infinite cap, so it is uncapped), and ``(H,)`` float64
      caps of the hosts that have at least one page.
    """
    del page_id
    cap_of = {str(h): float(c) for h, c in zip(np.asarray(host_ids).tolist(), np.asarray(host_caps).tolist())}
    used: dict[str, int] = {}
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


def hosts_from_dataset(host_id: ArrayLike, host_constrained: ArrayLike,
                       cap: float | Mapping[int, float] | Callable[[np.ndarray, np.ndarray], ArrayLike],
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host constraints from the NeurIPS-19 data set's host table.

    The data set marks each host ``Is_constrained`` (``host_hostid_isconstrained.txt``;
    :class:`jaxcrawl.io.neurips19.CrawlDataset` fields ``host_id`` and
    ``host_constrained``) but gives no cap values, so the caller supplies them.

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


def url_host(page_id: object) -> str | None:
    """The lower-cased host name of a URL page id, or None when it is not a URL."""
    text = str(page_id)
    if "://" not in text:
        return None
    host = urllib.parse.urlsplit(text).hostname
    return host.lower() if host else None


def load_host_caps(path: PathLike, page_id: ArrayLike, *, pages_path: PathLike | None = None,
                   unknown_pages: str = "error") -> tuple[np.ndarray, np.ndarray]:
    """The host constraints of the caps file ``path`` for pages ``page_id``.

    Pages are mapped to hosts by, in order: ``pages_path`` if given; else the file named
    by a ``# pages: FILE`` comment in the caps file (:func:`read_page_hosts`); else, when
    every page id is a URL, its host name (:func:`url_host`), so a caps file keyed by host
    names needs no mapping.  Pages whose host has no cap row (or an ``inf`` cap) are
    uncapped.

    Args:
      path: the caps CSV (:func:`read_host_caps`).
      page_id: ``(n,)`` the problem's page ids, in problem order.
      pages_path: a ``page_id,host_id`` mapping CSV overriding the one the caps file names.
      unknown_pages: a mapping row whose page is not in ``page_id``: ``"error"`` (default,
        ``ValueError`` naming file and line) or ``"ignore"``.

    Returns:
      ``(host_index, host_cap)`` as :func:`host_index` returns them.
    """
    if unknown_pages not in ("error", "ignore"):
        raise ValueError("unknown_pages must be 'error' or 'ignore'")
    host_ids, caps, named = read_host_caps(path)
    mapping = os.fspath(pages_path) if pages_path is not None else named
    ids = [str(p) for p in np.asarray(page_id).tolist()]
    if mapping is not None:
        table = read_table(mapping, PAGE_HOSTS)
        pos = {p: i for i, p in enumerate(ids)}
        page_host: list[str | None] = [None] * len(ids)
        for lineno, p, h in zip(table.line.tolist(), table["page_id"].tolist(), table["host_id"].tolist()):
            i = pos.get(p)
            if i is None:
                if unknown_pages == "error":
                    raise TableError(mapping, lineno, f"page_id {p!r} is not one of the problem's pages")
                continue
            page_host[i] = h
    else:
        page_host = [url_host(p) for p in ids]
        if any(h is None for h in page_host):
            raise ValueError(
                f"{os.fspath(path)}: no page->host mapping: add a line '# pages: FILE' naming a "
                "page_id,host_id CSV (or use URLs as page ids)")
    return host_index(ids, page_host, host_ids, caps)


# ------------------------------------------------------------------ crawl delays
#: Crawl-delay table ``host,crawl_delay``: the minimum time between two fetches of a host,
#: in seconds (robots.txt's ``Crawl-delay``).
CRAWL_DELAYS = Schema(
    "crawl-delay table",
    (Column("host", aliases=("host_id",)),
     Column("crawl_delay", "number", minimum=0.0, aliases=("delay", "crawl_delay_seconds"))),
    key="host", rows="hosts", min_rows=0, comments=True,
)


def read_crawl_delays(path: PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read a crawl-delay table ``host,crawl_delay`` (seconds, >= 0; CSV, Parquet or JSON
    Lines).  Returns ``(hosts, delays)``: object array of host names (lower-cased) and
    float64 seconds."""
    t = read_table(path, CRAWL_DELAYS)
    hosts = np.asarray([str(h).lower() for h in t["host"].tolist()], object)
    return hosts, t["crawl_delay"]


def robots_crawl_delays(directory: PathLike, *, user_agent: str = "*") -> tuple[np.ndarray, np.ndarray]:
    """Crawl delays from a directory of robots.txt files, parsed with the standard
    library's :class:`urllib.robotparser.RobotFileParser`.

    A file ``HOST.txt``, ``HOST/robots.txt`` or ``HOST`` holds the robots.txt of ``HOST``.
    A host's delay is its ``Crawl-delay`` for ``user_agent`` (the ``*`` group when no group
    names the agent), else the interval of its ``Request-rate`` (``requests/seconds`` ->
    ``seconds / requests``); hosts with neither are left out (no delay).

    Returns:
      ``(hosts, delays)``: object array of host names (lower-cased), float64 seconds.
    """
    import urllib.robotparser

    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"{directory}: not a directory (expected robots.txt files named HOST.txt "
                         "or HOST/robots.txt)")
    hosts: list[str] = []
    delays: list[float] = []
    for name in sorted(os.listdir(directory)):
        full = os.path.join(directory, name)
        if os.path.isdir(full):
            full = os.path.join(full, "robots.txt")
            if not os.path.isfile(full):
                continue
            host = name
        else:
            host = name[:-4] if name.lower().endswith(".txt") else name
        with open(full, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
        rp = urllib.robotparser.RobotFileParser()
        rp.parse(lines)
        delay = rp.crawl_delay(user_agent)
        if delay is None:
            rate = rp.request_rate(user_agent)
            if rate is not None and rate.requests > 0:
                delay = rate.seconds / rate.requests
        if delay is None:
            continue
        delay = float(delay)
        if not (math.isfinite(delay) and delay >= 0):
            raise ValueError(f"{full}: Crawl-delay must be a number >= 0; got {delay!r}")
        hosts.append(host.lower())
        delays.append(delay)
    return np.asarray(hosts, object), np.asarray(delays, np.float64)


def page_hosts(page_id: ArrayLike, *, pages_path: PathLike | None = None,
               unknown_pages: str = "error") -> list[str | None]:
    """The host of every page: from a ``page_id,host_id`` mapping file when given, else the
    host name of URL page ids (None for a page without one)."""
    ids = [str(p) for p in np.asarray(page_id).tolist()]
    if pages_path is None:
        return [url_host(p) for p in ids]
    table = read_table(pages_path, PAGE_HOSTS)
    pos = {p: i for i, p in enumerate(ids)}
    out: list[str | None] = [None] * len(ids)
    for lineno, p, h in zip(table.line.tolist(), table["page_id"].tolist(), table["host_id"].tolist()):
        i = pos.get(str(p))
        if i is None:
            if unknown_pages == "error":
                raise TableError(os.fspath(pages_path), lineno, f"page_id {p!r} is not one of the problem's pages")
            continue
        out[i] = str(h).lower()
    return out


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
