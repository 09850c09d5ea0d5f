"""Host files: per-host crawl-rate caps, crawl delays, and the page -> host mapping.

A caps table ``host_id,cap`` gives each host's largest total crawl rate; a crawl-delay
table ``host,crawl_delay`` (or a directory of robots.txt files) the least time between two
fetches of a host.  Pages are mapped to hosts by a ``page_id,host_id`` table, else by the
host of URL page ids.  Every host -- a caps or crawl-delay row, a robots.txt file's name, a
mapping's host id, a URL's host -- is read by one rule, :func:`canonical_host` (case, IDNA,
one trailing dot, userinfo, default ports); a caps or crawl-delay row whose host has no page
is an error naming its line (``unmatched="warn"``: a warning).
"""
from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import Sequence

import numpy as np
from jax.typing import ArrayLike

from .._src.bulk_text import arrow_text
from .._src.hostmap import PageHosts, canonical_host, host_delays, host_index, url_page_hosts
from ..core.solve import HostCaps
from ._schema import Column, PathLike, Schema, TableError
from ._tables import read_table

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


#: Crawl-delay table ``host,crawl_delay``: the minimum time between two fetches of a host,
#: in seconds (robots.txt's ``Crawl-delay``).
CRAWL_DELAYS = Schema(
    "crawl-delay table",
    (Column("host", aliases=("host_id",)),
     Column("crawl_delay", "number", minimum=0.0, aliases=("delay", "crawl_delay_seconds"))),
    key="host", rows="hosts", min_rows=0, comments=True,
)


def _page_hosts(page_id: ArrayLike | PageHosts, pages_path: PathLike | None, unknown_pages: str, *,
                hint: str = "--hosts FILE") -> PageHosts:
    """The host keys (:func:`canonical_host`) of the pages: from a ``page_id,host_id`` table
    when given (a row whose page is not in ``page_id``: ``TableError`` naming its line, or
    ignored), else the host of URL page ids (none for a page without one).  ``page_id`` may
    be a :class:`PageHosts` of URL page ids found already (used as it is without a table)."""
    if unknown_pages not in ("error", "ignore"):
        raise ValueError("unknown_pages must be 'error' or 'ignore'")
    if isinstance(page_id, PageHosts):
        if pages_path is None:
            return page_id
        page_id = page_id.page_id
    if pages_path is None:
        try:
            return url_page_hosts(page_id)  # url_host once per distinct scheme://authority
        except ValueError as err:  # err names the page; say where its host could come from instead
            raise ValueError(f"{err}: its host is unknown; give a page_id,host_id mapping ({hint})") from None
    import pyarrow.compute as pc

    table = read_table(pages_path, PAGE_HOSTS)
    n = len(page_id)
    # each mapping row's page, found by hashing the ids (str of each id, as the rows are text)
    pos = pc.index_in(arrow_text(table["page_id"]), value_set=arrow_text(page_id)).fill_null(-1)
    pos = np.asarray(pos.to_numpy(zero_copy_only=False), np.int64)
    known = pos >= 0
    # each distinct host_id through the host rule once
    enc = pc.dictionary_encode(arrow_text(table["host_id"]))
    keys: dict[str, int] = {}
    key_code, refused = [], {}
    for j, h in enumerate(enc.dictionary.to_pylist()):
        try:
            key_code.append(keys.setdefault(canonical_host(h), len(keys)))
        except ValueError as err:
            key_code.append(-1)
            refused[j] = err
    host = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
    # the first row (file order) that fails, as a row-by-row reading would meet it
    first_unknown = int(np.argmin(known)) if unknown_pages == "error" and not known.all() else len(pos)
    bad = known & np.isin(host, np.fromiter(refused, np.int64, len(refused)))
    first_bad = int(np.argmax(bad)) if bad.any() else len(pos)
    if first_unknown < len(pos) and first_unknown <= first_bad:
        raise TableError(os.fspath(pages_path), int(table.line[first_unknown]),
                         f"page_id {table['page_id'][first_unknown]!r} is not one of the problem's pages")
    if first_bad < len(pos):
        raise TableError(os.fspath(pages_path), int(table.line[first_bad]), f"host_id: {refused[host[first_bad]]}",
                         column="host_id")
    codes = np.full(n, -1, np.int64)
    codes[pos[known]] = np.asarray(key_code + [-1], np.int64)[host[known]]
    return PageHosts(page_id, codes, list(keys))


def _row_hosts(path: str, table, column: str) -> list[str]:
    """The host keys (:func:`canonical_host`) of a caps or crawl-delay table's rows;
    :class:`TableError` naming the line of a host the rule refuses, or of two rows that
    name one host (e.g. ``Example.com`` and ``example.com.``)."""
    keys: list[str] = []
    first: dict[str, tuple[int, str]] = {}
    for lineno, h in zip(table.line.tolist(), table[column].tolist()):
        try:
            key = canonical_host(h)
        except ValueError as err:
            raise TableError(path, lineno, f"{column}: {err}", column=column) from None
        if key in first:
            line0, h0 = first[key]
            raise TableError(path, lineno, f"{column} {h!r} is the host {key!r} of line {line0} ({h0!r}): one row "
                             "per host (hosts are compared case-insensitively, in IDNA form, without a trailing "
                             "dot or a default port)", column=column)
        first[key] = (lineno, str(h))
        keys.append(key)
    return keys


def _check_unmatched(path: str, table, column: str, keys: Sequence[str], page_host: PageHosts,
                     unmatched: str, what: str) -> None:
    """A row whose host has no page: :class:`TableError` naming its file, line and host
    (``unmatched="error"``), a ``UserWarning`` per such row (``"warn"``), or nothing."""
    if unmatched == "ignore":
        return
    _report_unmatched(path, table, column, keys, ~_rows_matched(keys, page_host), unmatched, what)


def _rows_matched(keys: Sequence[str], page_host: PageHosts) -> np.ndarray:
    """``(rows,)`` bool: the row's host has a page among ``page_host``."""
    present = np.bincount(page_host.codes + 1, minlength=len(page_host.values) + 1)[1:] > 0
    have = {h for h, p in zip(page_host.values, present.tolist()) if p}
    return np.asarray([k in have for k in keys], bool)


def _report_unmatched(path: str, table, column: str, keys: Sequence[str], missing_rows: np.ndarray,
                      unmatched: str, what: str, stacklevel: int = 4) -> None:
    """The error or warnings of the rows ``missing_rows`` (``(rows,)`` bool) under ``unmatched``."""
    if unmatched == "ignore" or not np.any(missing_rows):
        return
    missing = [(lineno, h, k) for lineno, h, k, m in zip(table.line.tolist(), table[column].tolist(), keys,
                                                         np.asarray(missing_rows, bool).tolist()) if m]
    lineno, h, k = missing[0]
    more = f" ({len(missing)} such rows)" if len(missing) > 1 else ""
    text = (f"{what} host {h!r}" + (f" (host {k!r})" if k != h else "")
            + f" matches no page's host{more}: a misspelt host, or a page -> host mapping that misses its pages")
    if unmatched == "error":
        raise TableError(path, lineno, text, column=column,
                         hint="-- fix the row or the mapping, or let such rows pass with a warning "
                              "(--unmatched-hosts warn of solve, schedule and evaluate; unmatched='warn' in Python)")
    for lineno, h, k in missing:
        warnings.warn(f"{path}:{lineno}: {what} host {h!r}" + (f" (host {k!r})" if k != h else "")
                      + " matches no page's host; the row is ignored", UserWarning, stacklevel=stacklevel)


def _check_unmatched_option(unmatched: str) -> None:
    if unmatched not in ("error", "warn", "ignore"):
        raise ValueError(f"unmatched must be 'error', 'warn' or 'ignore'; got {unmatched!r}")


def read_host_caps(path: PathLike, page_id: ArrayLike, *, pages_path: PathLike | None = None,
                   unknown_pages: str = "error", all_hosts: bool = False, unmatched: str = "error") -> HostCaps:
    """The host caps of the table ``path`` for the pages ``page_id`` (what
    ``solve(..., caps=...)`` takes; Kolobov et al., SIGIR-19).

    The caps table has a header ``host_id,cap``, then one row per host: ``host_id`` any
    non-empty string, ``cap`` the host's largest total crawl rate (crawls per unit time,
    the bandwidth's unit), a number > 0 or ``inf`` (uncapped); host ids distinct.  Blank
    lines and ``#`` comments are ignored, except ``# pages: FILE``, which names the page ->
    host mapping (relative to the caps file's directory).

    Pages are mapped to hosts by, in order: ``pages_path`` if given; else the file named by
    ``# pages: FILE``; else, when every page id is a URL, its host name (so a caps table
    keyed by host names needs no mapping).  The mapping is a table ``page_id,host_id`` (both
    non-empty, page ids distinct).  Pages whose host has no cap row (or an ``inf`` cap) are
    uncapped.  Hosts of the caps rows, the mapping and the URLs are compared by
    :func:`~jaxcrawl.io.canonical_host` (``WWW.Example.com.`` is ``www.example.com``).

    Args:
      path: the caps table.
      page_id: ``(n,)`` the problem's page ids, in problem order.
      pages_path: a ``page_id,host_id`` mapping overriding the one the caps file names.
      unknown_pages: a mapping row whose page is not in ``page_id``: ``"error"`` (default,
        :class:`TableError` naming file and line) or ``"ignore"``.
      all_hosts: index every finite-cap host in file order (the same indices on every
        process of a job, whatever pages it holds); default: only the hosts with pages, in
        order of their first page.
      unmatched: a caps row whose host has no page among ``page_id``: ``"error"`` (default,
        :class:`TableError` naming file, line and host), ``"warn"`` (a ``UserWarning`` per
        row) or ``"ignore"`` (e.g. a process holding only part of the pages).

    Returns:
      :class:`~jaxcrawl.HostCaps` ``(host_id, cap)``: ``(n,)`` int32 index into ``cap``
      (``-1``: uncapped) and float64 caps.

    Raises:
      TableError: (a ``ValueError``) naming the file and line, for a missing or wrong
        header, a wrong number of fields, an empty id, a cap that is not a number > 0, a
        duplicate host (after the host rule) or page, a mapping row of an unknown page, a
        host the host rule refuses, or a row whose host has no page.
      ValueError: no mapping and page ids that are not URLs.
    """
    _check_unmatched_option(unmatched)
    caps, matched, report = read_host_caps_rows(path, page_id, pages_path=pages_path, unknown_pages=unknown_pages,
                                            all_hosts=all_hosts)
    report(~matched, unmatched, stacklevel=3)
    return caps


def read_host_caps_rows(path: PathLike, page_id: ArrayLike, *, pages_path: PathLike | None = None,
                    unknown_pages: str = "error", all_hosts: bool = False):
    """:func:`read_host_caps` with the unmatched-row check left to the caller: ``(caps, matched, report)``,
    ``matched`` ``(rows,)`` bool (the caps row's host has a page among ``page_id``) and
    ``report(missing_rows, unmatched)`` the check's error or warnings for the rows
    ``missing_rows`` (a job of several processes judges the rows by every process's pages)."""
    t = read_table(path, HOST_CAPS)
    keys = _row_hosts(t.path, t, "host_id")
    named = _pages_comment(t.path, t.comments)
    mapping = os.fspath(pages_path) if pages_path is not None else named
    page_host = _page_hosts(page_id, mapping, unknown_pages,
                            hint=f"--hosts FILE, or a line '# pages: FILE' in {os.fspath(path)}")
    if mapping is None and np.any(page_host.codes < 0):
        raise ValueError(
            f"{os.fspath(path)}: no page->host mapping: add a line '# pages: FILE' naming a "
            "page_id,host_id CSV (or use URLs as page ids)")
    caps = HostCaps(*host_index(page_host, np.asarray(keys, object), t["cap"], all_hosts=all_hosts))
    return caps, _rows_matched(keys, page_host), functools.partial(_report_unmatched, t.path, t, "host_id", keys,
                                                                   what="caps row")


def read_crawl_delays(path: PathLike, page_id: ArrayLike, *, pages_path: PathLike | None = None,
                      user_agent: str = "*", unknown_pages: str = "error", unmatched: str = "error",
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The crawl delays of the pages' hosts: the least time between two fetches of a host.

    ``path`` is a table ``host,crawl_delay`` (seconds >= 0; ``host_id``/``delay`` accepted
    as column names; CSV, Parquet or JSON Lines) or a directory of robots.txt files
    (``HOST.txt``, ``HOST/robots.txt`` or ``HOST``), parsed by the standard library's
    :class:`urllib.robotparser.RobotFileParser`: a host's ``Crawl-delay`` for
    ``user_agent`` (the ``*`` group when no group names it), else the interval of its
    ``Request-rate``; hosts with neither have no delay.  Hosts are compared by
    :func:`~jaxcrawl.io.canonical_host` (case, IDNA, one trailing dot, userinfo, default
    ports).  Pages are mapped to hosts by ``pages_path`` (``page_id,host_id``) or, without
    it, by the host of URL page ids.  A table row whose host has no page is an error naming
    its line (``unmatched``: ``"error"``, ``"warn"`` or ``"ignore"``, as for
    :func:`read_host_caps`); a robots.txt directory may hold files of hosts without pages.

    Returns:
      ``(host_index, delay, names)``: ``(n,)`` int32 (``-1``: no delay known), ``(H,)``
      float64 seconds and the ``(H,)`` host keys.

    Raises:
      ValueError: a malformed table (:class:`TableError`, naming file and line) or
        robots.txt delay, or no mapping and no page id a URL.
    """
    _check_unmatched_option(unmatched)
    t = None
    if os.path.isdir(path):
        hosts, delays = _robots_crawl_delays(path, user_agent=user_agent)
    else:
        t = read_table(path, CRAWL_DELAYS)
        hosts = np.asarray(_row_hosts(t.path, t, "host"), object)
        delays = t["crawl_delay"]
    page_host = _page_hosts(page_id, pages_path, unknown_pages)
    if pages_path is None and not np.any(page_host.codes >= 0):
        raise ValueError("no page -> host mapping: give --hosts FILE (page_id,host_id) or use URLs as page ids")
    if t is not None:
        _check_unmatched(t.path, t, "host", hosts.tolist(), page_host, unmatched, "crawl-delay row")
    return host_delays(page_host, hosts, delays)


def _robots_crawl_delays(directory: PathLike, *, user_agent: str = "*") -> tuple[np.ndarray, np.ndarray]:
    """Crawl delays from a directory of robots.txt files, parsed with the standard
    library's :class:`urllib.robotparser.RobotFileParser`.

    A file ``HOST.txt``, ``HOST/robots.txt`` or ``HOST`` holds the robots.txt of ``HOST``.
    A host's delay is its ``Crawl-delay`` for ``user_agent`` (the ``*`` group when no group
    names the agent), else the interval of its ``Request-rate`` (``requests/seconds`` ->
    ``seconds / requests``); hosts with neither are left out (no delay).  Two files of one
    host (:func:`~jaxcrawl.io.canonical_host`, e.g. ``Example.com.txt`` and
    ``example.com/robots.txt``) are an error naming both.

    Returns:
      ``(hosts, delays)``: object array of host keys, float64 seconds.
    """
    import urllib.robotparser

    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"{directory}: not a directory (expected robots.txt files named HOST.txt "
                         "or HOST/robots.txt)")
    hosts: list[str] = []
    delays: list[float] = []
    seen: dict[str, str] = {}
    for name in sorted(os.listdir(directory)):
        full = os.path.join(directory, name)
        if os.path.isdir(full):
            full = os.path.join(full, "robots.txt")
            if not os.path.isfile(full):
                continue
            host = name
        else:
            host = name[:-4] if name.lower().endswith(".txt") else name
        try:
            key = canonical_host(host)
        except ValueError as err:
            raise ValueError(f"{full}: its name is not a host: {err}") from None
        if key in seen:
            raise ValueError(f"{full} and {seen[key]} are robots.txt files of one host {key!r}; keep one")
        seen[key] = full
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
        hosts.append(key)
        delays.append(delay)
    return np.asarray(hosts, object), np.asarray(delays, np.float64)
