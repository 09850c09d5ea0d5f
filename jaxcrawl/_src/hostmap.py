"""Pages grouped by host: the host rule (:func:`canonical_host`), dense host indices, caps
merged from two sources, the data set's host constraints, and the host of a URL page id."""
from __future__ import annotations

import encodings.idna
import functools
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from jax.typing import ArrayLike

from .fileio import open_read

#: The web's default ports (http's and https's), left out of a host key whatever the scheme.
DEFAULT_PORTS = frozenset((80, 443))
# IDNA 2003's label separators (RFC 3490 3.1): the full stop and its ideographic,
# full-width and half-width forms
_DOTS = re.compile("[\u002e\u3002\uff0e\uff61]")
# a URL whose host needs no parsing beyond this: scheme://host[:port] then /, ? or # or the end,
# the host of ASCII letters, digits, dots and dashes (no userinfo, no IPv6 literal, no space)
_PLAIN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.?)(?::([0-9]{1,5}))?"
                        r"(?:[/?#][^\x00-\x20]*)?\Z")


def canonical_host(text: object) -> str:
    """The host key of a host name, a ``host:port`` or a URL: the one rule by which host caps,
    crawl delays, robots.txt files, page -> host mappings, URL page ids and URLFrontier queue
    keys name a host.

    * letters lower-cased; a label with non-ASCII characters written in its IDNA ASCII form
      (Python's ``idna`` codec, IDNA 2003: ``Bücher.de`` -> ``xn--bcher-kva.de``); the
      ideographic and full-width full stops separate labels like ``.``;
    * one trailing dot removed (``example.com.`` is ``example.com``);
    * userinfo removed (``user:pw@example.com`` is ``example.com``);
    * the default ports removed: ``:80`` (http's) and ``:443`` (https's), whatever the scheme
      (so a key never carries them and a bare ``example.com:443`` row is the https pages'
      host); any other port stays part of the key (``example.com:8080``): robots.txt rules
      and crawl delays apply per host and port, so a non-default port is a host of its own;
    * an IPv6 literal without its brackets (``[::1]`` is ``::1``), in brackets with a port
      (``[::1]:8080``).

    ASCII labels are only lower-cased (so host ids of a page -> host table that are not DNS
    names stay usable; a ``:`` followed by a non-number is part of such an id).  The rule is
    idempotent: ``canonical_host(canonical_host(h)) == canonical_host(h)``.

    Raises:
      ValueError: naming the host, for an empty host or label, a label that IDNA refuses (e.g.
        longer than 63 characters once encoded), a port above 65535, or a URL that
        ``urllib.parse.urlsplit`` refuses.
    """
    text = str(text).strip()
    if "://" in text:
        m = _PLAIN_URL.match(text)
        if m is not None:
            return _host_key(m.group(1), m.group(2) or "", text)
        try:
            netloc = urllib.parse.urlsplit(text).netloc
        except ValueError as err:
            raise ValueError(f"{text!r} is not a valid URL ({err})") from None
    else:
        netloc = re.split(r"[/?#]", text, maxsplit=1)[0]
    return _canonical_netloc(netloc, text)


@functools.lru_cache(maxsize=1 << 16)
def _canonical_netloc(netloc: str, text: str) -> str:
    hostport = netloc.rpartition("@")[2]
    if hostport.startswith("["):  # an IPv6 literal
        end = hostport.find("]")
        rest = hostport[end + 1:] if end >= 0 else "?"
        if end < 0 or (rest and not re.fullmatch(r":[0-9]*", rest)):
            raise ValueError(f"host {text!r}: an IPv6 literal must be [ADDRESS] or [ADDRESS]:PORT")
        return _host_key(hostport[1:end], rest[1:], text, ipv6=True)
    if hostport.count(":") > 1:  # a bare IPv6 literal (it has no port)
        return _host_key(hostport, "", text, ipv6=True)
    host, sep, port = hostport.rpartition(":")
    if not sep or not re.fullmatch(r"[0-9]*", port):  # no port ('shard:x' is a name)
        host, port = hostport, ""
    return _host_key(host, port, text)


def _host_key(host: str, port: str, text: str, *, ipv6: bool = False) -> str:
    if port:
        number = int(port)
        if number > 65535:
            raise ValueError(f"host {text!r}: port {number} is not in [0, 65535]")
        port = "" if number in DEFAULT_PORTS else str(number)
    if ipv6:
        host = host.lower()
        if not host:
            raise ValueError(f"host {text!r}: empty IPv6 literal")
        return f"[{host}]:{port}" if port else host
    host = _DOTS.sub(".", host)
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise ValueError(f"host {text!r}: empty host name")
    if host.isascii():
        key = host.lower()
        if ".." in key or key.startswith("."):
            raise ValueError(f"host {text!r}: empty label (two dots in a row, or a leading dot)")
    else:
        labels = []
        for label in host.split("."):
            if not label:
                raise ValueError(f"host {text!r}: empty label (two dots in a row, or a leading dot)")
            if label.isascii():
                labels.append(label.lower())
                continue
            try:
                labels.append(encodings.idna.ToASCII(label).decode("ascii").lower())
            except UnicodeError as err:
                raise ValueError(f"host {text!r}: label {label!r} has no IDNA ASCII form ({err}); write the host "
                                 "in its ASCII (xn--) form") from None
        key = ".".join(labels)
    return f"{key}:{port}" if port else key


def canonical_hosts(hosts: Sequence[object]) -> list[str]:
    """:func:`canonical_host` of each of ``hosts``."""
    return [canonical_host(h) for h in hosts]


def url_host(page_id: object) -> str | None:
    """The host key (:func:`canonical_host`) of a URL page id, or None when it is not a URL
    (no ``://``) or has no host; ``ValueError`` naming the page when the URL cannot be read
    (e.g. an unclosed IPv6 bracket) or its host breaks the host rule."""
    text = str(page_id)
    if "://" not in text:
        return None
    m = _PLAIN_URL.match(text)
    if m is not None:
        return _host_key(m.group(1), m.group(2) or "", text)
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as err:
        raise ValueError(f"page {text!r} is not a valid URL ({err})") from None
    if not parts.hostname:
        return None
    try:
        return _canonical_netloc(parts.netloc, text)
    except ValueError as err:
        raise ValueError(f"page {text!r}: {err}") from None


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


class PageHosts(NamedTuple):
    """Pages with their host keys found once: page ``i``'s host key is ``values[codes[i]]``
    (``codes[i] == -1``: no host).  ``values`` are distinct; ``page_id`` the pages' ids."""

    page_id: Any
    codes: np.ndarray
    values: list[str]

    def first_pages(self) -> np.ndarray:
        """The codes of the pages' hosts in order of each host's first page."""
        n = self.codes.size
        first = np.full(len(self.values) + 1, n, np.int64)  # the last: pages without a host
        np.minimum.at(first, self.codes, np.arange(n, dtype=np.int64))  # one pass, no sort of the pages
        first = first[:-1]
        present = np.flatnonzero(first < n)
        return present[np.argsort(first[present], kind="stable")]

    def dense_index(self, keep: Callable[[str], bool],
                    used: dict[str, int] | None = None) -> tuple[np.ndarray, list[str]]:
        """``(index, names)``: ``(n,)`` int32 index of each page's host among the hosts
        ``keep`` accepts (``-1``: none), numbered in order of their first page after those
        already in ``used``, and every numbered host in index order.  ``keep`` is asked once
        per distinct host."""
        used = {} if used is None else used
        per_code = np.full(len(self.values) + 1, -1, np.int32)  # the last: pages without a host
        for c in self.first_pages().tolist():
            if keep(self.values[c]):
                per_code[c] = used.setdefault(self.values[c], len(used))
        return per_code[self.codes], list(used)


def url_page_hosts(page_id: Any) -> PageHosts:
    """:class:`PageHosts` of URL page ids: each page's :func:`url_host` (no host: a page id
    that is not a URL), found once per distinct ``scheme://authority`` prefix
    (:func:`jaxcrawl._src.bulk_text.url_host_codes`); ``ValueError`` naming the first page
    whose URL cannot be read, as :func:`url_host` raises it."""
    from .bulk_text import arrow_text, url_host_codes

    ids = np.asarray(page_id) if not isinstance(page_id, (list, np.ndarray)) else page_id
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iufb":  # numbers: no URL, no host
        return PageHosts(page_id, np.full(ids.shape[0], -1, np.int64), [])
    codes, found = url_host_codes(arrow_text(ids, "page_id"), url_host)
    index: dict[str, int] = {}
    remap = np.asarray([-1 if not h else index.setdefault(h, len(index)) for h in found] + [-1], np.int64)
    return PageHosts(page_id, remap[codes] if codes.size else codes, list(index))


def host_index(page_host: PageHosts, host_ids: ArrayLike, host_caps: ArrayLike, *,
               all_hosts: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Dense host indices of the pages and the caps they index.

    Args:
      page_host: the pages' host keys (:class:`PageHosts`, keys of :func:`canonical_host`,
        compared as written with ``host_ids``).
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
    used = dict.fromkeys(h for h, c in pairs if np.isfinite(c)) if all_hosts else {}
    used = {h: i for i, h in enumerate(used)}
    idx, names = page_host.dense_index(lambda h: h in cap_of and np.isfinite(cap_of[h]), used)
    return idx, np.asarray([cap_of[h] for h in names], np.float64)


def host_delays(page_host: PageHosts, hosts: ArrayLike,
                delays: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense host indices of the pages whose host has a crawl delay (``page_host`` and
    ``hosts`` host keys of :func:`canonical_host`, compared as written).

    Returns:
      ``(host_index, delay, names)``: ``(n,)`` int32 (``-1``: no delay known), ``(H,)``
      float64 seconds and the ``(H,)`` host names.
    """
    delay_of = {str(h): float(d) for h, d in zip(np.asarray(hosts).tolist(), np.asarray(delays).tolist())}
    idx, names = page_host.dense_index(delay_of.__contains__)
    return idx, np.asarray([delay_of[h] for h in names], np.float64), np.asarray(names, object)


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
    # the distinct (a, b) pairs in lexicographic order, as np.unique(pair, axis=0) gives them, through
    # one int64 key per pair (a 1-D sort: several times faster than sorting rows)
    width = (int(pair[:, 1].max()) + 2) if pair.size else 1
    _, first, inverse = np.unique((pair[:, 0] + 1) * width + (pair[:, 1] + 1), return_index=True,
                                  return_inverse=True)
    uniq = pair[first]
    rows = np.flatnonzero(some)
    for col, (this, other) in ((0, what), (1, what[::-1])):
        keys, counts = np.unique(uniq[:, col], return_counts=True)
        split = keys[(counts > 1) & (keys >= 0)]
        if split.size:
            h = split[0]
            parts = uniq[uniq[:, col] == h]
            pages = [ids[rows[first[np.flatnonzero((uniq == q).all(axis=1))[0]]]] for q in parts[:2]]
            pages = [p.item() if hasattr(p, "item") else p for p in pages]
            if names is not None and names[col] is not None:
                host = f"host {str(np.asarray(names[col], object)[h])!r} of {this}"
            else:  # named by its first page (and that page's URL host), never by an index
                try:
                    name = url_host(str(pages[0]))
                except ValueError:
                    name = None
                host = (f"host {name!r} of {this}" if name else f"the host of page {pages[0]!r} in {this}")
            raise ValueError(f"{this} and {other} group the pages differently: {host} has pages "
                             f"in {len(parts)} groups of {other} (e.g. pages {pages[0]!r} and {pages[1]!r}); "
                             "map pages to hosts the same way for both (one --hosts file or URL page ids)")
    inf = np.inf
    cap = np.minimum(np.where(uniq[:, 0] >= 0, ca[np.maximum(uniq[:, 0], 0)] if ca.size else inf, inf),
                     np.where(uniq[:, 1] >= 0, cb[np.maximum(uniq[:, 1], 0)] if cb.size else inf, inf))
    index = np.full(a.size, -1, np.int32)
    # each page's group: the row of its (a, b) pair among the unique pairs
    index[rows] = inverse.reshape(-1).astype(np.int32)
    return index, cap
