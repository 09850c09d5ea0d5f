"""Per-page text work done column-wise (pyarrow compute) at crawl-database scale.

:func:`arrow_text` turns ids into Arrow text; :func:`url_host_codes` applies a per-URL host rule
once per distinct ``scheme://authority`` prefix instead of once per page, with exactly the
per-element result.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

# a URL whose authority ``urllib.parse.urlsplit`` reads from its prefix alone: a scheme, ``://``
# and no character <= U+0020 anywhere (urlsplit strips or removes those before splitting)
_SCHEME = r"^[A-Za-z][A-Za-z0-9+.\-]*://"
_PREFIX = r"^(?P<prefix>[A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*)"
_SPACE = r"[\x00-\x20]"


def arrow_text(values, name: str = "ids"):
    """An Arrow string array of ``str(v)`` for each of ``values`` (an Arrow array, a list or
    a one-dimensional NumPy array), built in Arrow without a Python string per value where
    it can be (strings, integers); ``ValueError`` naming ``name`` for another shape."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
    a = values if isinstance(values, list) else np.asarray(values)
    if isinstance(a, np.ndarray):
        if a.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional; got shape {a.shape}")
        if a.dtype.kind in "iu":
            return pc.cast(pa.array(a), pa.string())
    if isinstance(a, list) or a.dtype.kind in "OU":
        try:
            return pa.array(a, pa.string())
        except (pa.ArrowTypeError, pa.ArrowInvalid, TypeError):
            pass
    return pa.array([str(v) for v in (a if isinstance(a, list) else a.tolist())], pa.string())


def url_host_codes(urls, host_of: Callable[[str], str | None]) -> tuple[np.ndarray, list[str | None]]:
    """``(codes, values)`` with ``values[codes[i]] == host_of(urls[i])`` for an Arrow string array
    ``urls``: ``host_of`` is called once per distinct ``scheme://authority`` prefix of the URLs
    whose host depends on that prefix only (no whitespace or control character anywhere), and
    once per other URL.  ``host_of`` must read a URL's host from its authority (as
    ``urllib.parse.urlsplit`` does); its ``ValueError`` is raised for the first such URL."""
    import pyarrow as pa
    import pyarrow.compute as pc

    simple = pc.and_(pc.match_substring_regex(urls, _SCHEME),
                     pc.invert(pc.match_substring_regex(urls, _SPACE))).to_numpy(zero_copy_only=False)
    prefix = pc.struct_field(pc.extract_regex(urls, _PREFIX), [0])
    enc = pc.dictionary_encode(pc.if_else(pa.array(simple), prefix, pa.scalar(None, pa.string())))
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    distinct = enc.dictionary.to_pylist()
    codes = np.asarray(enc.indices.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    values: list[str | None] = []
    try:
        values = [host_of(p) for p in distinct]
    except ValueError:  # the same error, for the same (first) URL, as the per-element loop
        for u in urls.to_pylist():
            host_of(u)
        raise
    others = np.flatnonzero(~simple)
    if others.size:
        raw = urls.take(pa.array(others)).to_pylist()
        codes[others] = len(values) + np.arange(others.size)
        values += [host_of(u) for u in raw]
    return codes, values


def float_repr(values: np.ndarray):
    """An Arrow string array of ``repr(float(v))`` for each float64 ``v``: Arrow's shortest
    round-trip digits where its notation is Python's (``1e-4 <= |v| < 1e7``, with ``.0``
    after an integer), Python's ``repr`` for the other values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    v = np.asarray(values, np.float64)
    text = pc.cast(pa.array(v), pa.string())
    whole = v == np.floor(v)  # Arrow writes 3.0 as "3", Python as "3.0"
    if whole.any():
        text = pc.if_else(pa.array(whole), pc.binary_join_element_wise(text, ".0", ""), text)
    other = ~((np.abs(v) >= 1e-4) & (np.abs(v) < 1e7))
    if other.any():
        text = pc.replace_with_mask(text, pa.array(other), pa.array([repr(x) for x in v[other].tolist()], pa.string()))
    return text


def json_strings(text):
    """An Arrow string array of each string's JSON text as ``json.dumps`` (ASCII) writes it,
    quotes included: plain printable ASCII is quoted column-wise, any other string by
    :func:`json.encoder.encode_basestring_ascii`."""
    import json

    import pyarrow as pa
    import pyarrow.compute as pc

    quoted = pc.binary_join_element_wise('"', text, '"', "")
    needs = pc.match_substring_regex(text, r'[^\x20-\x7e]|[\\"]')
    if pc.any(needs).as_py():
        raw = pc.filter(text, needs).to_pylist()
        quoted = pc.replace_with_mask(quoted, needs, pa.array([json.encoder.encode_basestring_ascii(x) for x in raw],
                                                               pa.string()))
    return quoted


def utf8_blocks(lines, chunk: int = 1 << 16):
    """The concatenated UTF-8 bytes of an Arrow string array, ``chunk`` rows at a time, read
    from its buffers without a Python string per row."""
    for s in range(0, len(lines), chunk):
        part = lines.slice(s, chunk)
        if len(part) == 0:
            continue
        offs = np.frombuffer(part.buffers()[1], np.int32, len(part) + 1, part.offset * 4)
        yield bytes(memoryview(part.buffers()[2])[offs[0]:offs[-1]])


def first_match(text, pattern: str) -> int | None:
    """The index of the first string of an Arrow string array that matches ``pattern`` (RE2), or None."""
    import pyarrow.compute as pc

    hit = pc.match_substring_regex(text, pattern)
    if not pc.any(hit).as_py():
        return None
    return int(np.flatnonzero(hit.to_numpy(zero_copy_only=False))[0])
