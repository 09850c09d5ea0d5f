r"""A live local web whose pages change as Poisson processes at known rates: the ground truth
that the freshness of a real crawler is measured against.

Pages are spread over hosts; every host listens on its own port of ``127.0.0.1`` (nothing
else is ever bound) and serves ``/robots.txt`` (``Crawl-delay`` in wall seconds, a
``Disallow: /private/`` rule and the sitemap's address), ``/sitemap.xml`` (every page of the
host; the *complete* pages of NeurIPS-19 §2 -- those that announce every change -- carry a
``<lastmod>`` of their last change) and the pages ``/p/<i>`` (``i`` the page's index),
whose body, ``ETag`` and ``Last-Modified`` give the page's version: the number of its
changes so far.  Model time runs ``seconds_per_day`` wall seconds per day; the change times
are drawn up front from ``seed`` over the web's lifetime of ``days`` (K19 §2: a Poisson
process of rate ``change_rate`` per page, drawn as a Poisson count and sorted uniform times),
and :meth:`LocalWeb.truth` returns them, so freshness is measured, not modelled.

The server is one asyncio event loop in a background thread speaking HTTP/1.1 with
keep-alive; it stops itself a few seconds after its lifetime ends.
"""
from __future__ import annotations

import asyncio
import email.utils
import threading
import time
from datetime import datetime, timezone

import numpy as np

__all__ = ["LocalWeb"]

_GRACE_S = 5.0
_MAX_HEADER = 16384


def _as_1d(name, value, dtype, n=None):
    arr = np.asarray(value, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional; got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} must have one entry per page ({n}); got {arr.shape[0]}")
    return arr


def _draw_changes(change_rate, days, rng):
    """Flat change times (days) of every page, sorted per page, and the per-page offsets."""
    counts = rng.poisson(change_rate * days)
    page = np.repeat(np.arange(change_rate.shape[0]), counts)
    times = rng.uniform(0.0, days, page.shape[0])
    order = np.lexsort((times, page))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return times[order], offsets


class LocalWeb:
    """Pages on hosts of ``127.0.0.1`` changing at Poisson times; a context manager.

    Args:
      change_rate: ``(n,)`` change rate of every page, per day (>= 0).
      host: ``(n,)`` host index of every page (0 .. m-1, every host holding a page).
      complete: ``(n,)`` bool: the page announces its changes in the sitemap's ``lastmod``.
      crawl_delay: ``(m,)`` per-host crawl delay in days (>= 0), published in robots.txt in
        wall seconds.
      seconds_per_day: wall seconds of one model day (> 0).
      seed: seed of the change times.
      port: 0 gives every host an ephemeral port; ``p > 0`` gives host ``h`` port ``p + h``.
      days: lifetime in model days: changes are drawn over it and the server stops itself
        5 seconds after it.

    ``urls``, ``sitemap_urls``, ``robots_urls``, ``ports`` and ``addresses`` (the bound
    sockets) are available once started; ``truth()`` gives every page's change times in unix
    seconds, ``version(page, at)`` a page's version at a time, ``served`` the number of
    responses sent.
    """

    def __init__(self, change_rate, host, complete, crawl_delay, *, seconds_per_day: float, seed: int,
                 port: int = 0, days: float = 100.0):
        rate = _as_1d("change_rate", change_rate, np.float64)
        n = rate.shape[0]
        if n == 0:
            raise ValueError("change_rate must hold at least one page")
        if not np.all(np.isfinite(rate) & (rate >= 0)):
            raise ValueError("change_rate must be finite and >= 0 (changes per day)")
        hosts = _as_1d("host", host, np.int64, n)
        if hosts.min() < 0:
            raise ValueError("host must hold host indices >= 0")
        num_hosts = int(hosts.max()) + 1
        if np.unique(hosts).shape[0] != num_hosts:
            raise ValueError("host must use every host index 0 .. max(host) (a host without pages)")
        comp = _as_1d("complete", complete, bool, n)
        delay = _as_1d("crawl_delay", crawl_delay, np.float64, num_hosts)
        if not np.all(np.isfinite(delay) & (delay >= 0)):
            raise ValueError("crawl_delay must be finite and >= 0 (days)")
        if not (np.isfinite(seconds_per_day) and seconds_per_day > 0):
            raise ValueError(f"seconds_per_day must be > 0; got {seconds_per_day}")
        if not (np.isfinite(days) and days > 0):
            raise ValueError(f"days must be > 0; got {days}")
        if port and not (0 < port and port + num_hosts <= 65536):
            raise ValueError(f"port must be 0 or a port with room for {num_hosts} hosts above it; got {port}")
        self.change_rate, self.host, self.complete, self.crawl_delay = rate, hosts, comp, delay
        self.seconds_per_day, self.days, self.seed = float(seconds_per_day), float(days), int(seed)
        self._port = int(port)
        self._times, self._offsets = _draw_changes(rate, float(days), np.random.default_rng(seed))
        # one sorted key per change, page-major, so that one searchsorted finds many pages' versions
        self._stride = float(days) + 1.0
        self._keys = np.repeat(np.arange(n), np.diff(self._offsets)) * self._stride + self._times
        self._host_pages = [np.flatnonzero(hosts == h) for h in range(num_hosts)]
        self.started_at: float | None = None
        self.ports: list[int] = []
        self.addresses: list[tuple] = []
        self.served = 0
        self._loop = self._thread = self._stop = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalWeb:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> LocalWeb:
        """Bind every host's port on 127.0.0.1 and start serving; the clock starts now."""
        if self._thread is not None:
            raise RuntimeError("this LocalWeb was already started")
        self._thread = threading.Thread(target=self._run, name="jaxcrawl-localweb", daemon=True)
        self._thread.start()
        if not self._ready.wait(30.0) or self._error is not None:
            self.close()
            raise RuntimeError(f"LocalWeb failed to start: {self._error!r}")
        return self

    def close(self) -> None:
        """Stop serving and release the ports (idempotent)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed in between
                pass
        if self._thread is not None:
            self._thread.join(30.0)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as err:  # reported to start()
            self._error = err
        finally:
            self._ready.set()
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self._tasks = set()
        servers = []
        try:
            for h in range(len(self._host_pages)):
                server = await asyncio.start_server(
                    lambda r, w, h=h: self._handle(h, r, w), host="127.0.0.1",
                    port=self._port + h if self._port else 0, reuse_address=True, backlog=256)
                servers.append(server)
            self.addresses = [s.sockets[0].getsockname() for s in servers]
            self.ports = [a[1] for a in self.addresses]
            self.started_at = time.time()
            self._ready.set()
            lifetime = self.days * self.seconds_per_day + _GRACE_S
            try:
                await asyncio.wait_for(self._stop.wait(), lifetime)
            except asyncio.TimeoutError:
                pass
        finally:
            for server in servers:
                server.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for server in servers:
                await server.wait_closed()

    # --------------------------------------------------------------------- truth
    @property
    def urls(self) -> list[str]:
        """Every page's URL, in page order."""
        self._check_started()
        return [f"http://127.0.0.1:{self.ports[h]}/p/{i}" for i, h in enumerate(self.host.tolist())]

    @property
    def sitemap_urls(self) -> list[str]:
        self._check_started()
        return [f"http://127.0.0.1:{p}/sitemap.xml" for p in self.ports]

    @property
    def robots_urls(self) -> list[str]:
        self._check_started()
        return [f"http://127.0.0.1:{p}/robots.txt" for p in self.ports]

    def truth(self) -> dict[str, np.ndarray]:
        """``{url: change times}`` of every page in unix seconds, over the whole lifetime."""
        self._check_started()
        wall = self.started_at + self._times * self.seconds_per_day
        return {url: wall[self._offsets[i]:self._offsets[i + 1]] for i, url in enumerate(self.urls)}

    def version(self, page, at: float):
        """Version (number of changes) of ``page`` (an index or an array of them) at unix time ``at``."""
        self._check_started()
        page = np.asarray(page, np.int64)
        t = np.clip((at - self.started_at) / self.seconds_per_day, -0.5, self.days)
        return np.searchsorted(self._keys, page * self._stride + t, side="right") - self._offsets[page]

    def _last_change(self, page, version):
        """Unix time of the change that made ``version`` (the start for version 0)."""
        index = np.maximum(self._offsets[page] + version - 1, 0)
        days = np.where(version > 0, self._times[index] if self._times.size else 0.0, 0.0)
        return self.started_at + days * self.seconds_per_day

    def _check_started(self) -> None:
        if self.started_at is None:
            raise RuntimeError("start the LocalWeb first (LocalWeb.start() or a with block)")

    # ------------------------------------------------------------------- serving
    async def _handle(self, h: int, reader, writer) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            while not self._stop.is_set():
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30.0)
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                        ConnectionError):
                    break
                if len(head) > _MAX_HEADER:
                    break
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3:
                    writer.write(self._response(400, b"bad request\n", close=True))
                    break
                method, target, version = parts
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, _, value = line.partition(":")
                        headers[key.strip().lower()] = value.strip()
                close = (headers.get("connection", "").lower() == "close"
                         or (version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive"))
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(length)
                status, body, extra = self._route(h, method, target.split("?", 1)[0], headers)
                self.served += 1
                writer.write(self._response(status, body, extra, close=close, head=method == "HEAD"))
                await writer.drain()
                if close:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the peer may be gone already
                pass

    @staticmethod
    def _response(status, body, extra=(), *, close=False, head=False) -> bytes:
        reason = {200: "OK", 304: "Not Modified", 400: "Bad Request", 404: "Not Found",
                  405: "Method Not Allowed"}[status]
        lines = [f"HTTP/1.1 {status} {reason}", "Server: jaxcrawl-localweb",
                 f"Date: {email.utils.formatdate(usegmt=True)}"]
        lines += [f"{k}: {v}" for k, v in extra]
        lines.append(f"Content-Length: {len(body) if status != 304 else 0}")
        lines.append("Connection: close" if close else "Connection: keep-alive")
        out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return out if head or status == 304 else out + body

    def _route(self, h: int, method: str, path: str, headers: dict):
        if method not in ("GET", "HEAD"):
            return 405, b"GET or HEAD only\n", [("Allow", "GET, HEAD")]
        if path == "/robots.txt":
            return 200, self._robots(h), [("Content-Type", "text/plain")]
        if path == "/sitemap.xml":
            return 200, self._sitemap(h), [("Content-Type", "application/xml")]
        if path.startswith("/private/"):
            return 200, b"<html><body>private</body></html>", [("Content-Type", "text/html")]
        if path.startswith("/p/") and path[3:].isdigit():
            page = int(path[3:])
            if page < self.host.shape[0] and self.host[page] == h:
                return self._page(page, headers)
        return 404, b"not found\n", [("Content-Type", "text/plain")]

    def _page(self, page: int, headers: dict):
        now = time.time()
        v = int(self.version(page, now))
        etag = f'"{v}"'
        extra = [("ETag", etag), ("Last-Modified", email.utils.formatdate(float(self._last_change(page, v)), usegmt=True)),
                 ("Content-Type", "text/html; charset=utf-8")]
        if headers.get("if-none-match") == etag:
            return 304, b"", extra
        body = (f"<html><head><title>page {page}</title></head><body><p>page {page} version {v}</p>"
                f"</body></html>").encode()
        return 200, body, extra

    def _robots(self, h: int) -> bytes:
        delay = self.crawl_delay[h] * self.seconds_per_day
        return (f"User-agent: *\nCrawl-delay: {delay:.6g}\nDisallow: /private/\n\n"
                f"Sitemap: http://127.0.0.1:{self.ports[h]}/sitemap.xml\n").encode()

    def _sitemap(self, h: int) -> bytes:
        now = time.time()
        port = self.ports[h]
        pages = self._host_pages[h]
        changed = self._last_change(pages, self.version(pages, now))
        lastmod = [f"<lastmod>{datetime.fromtimestamp(t, timezone.utc).isoformat(timespec='microseconds')}</lastmod>"
                   if c else "" for t, c in zip(changed.tolist(), self.complete[pages].tolist())]
        rows = [f"<url><loc>http://127.0.0.1:{port}/p/{p}</loc>{m}</url>" for p, m in zip(pages.tolist(), lastmod)]
        return ('<?xml version="1.0" encoding="UTF-8"?>\n'
                '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                + "".join(rows) + "</urlset>\n").encode()
