"""The paper reproductions of ``jaxcrawl reproduce``: one module per figure, each with ``NAME``,
``DESCRIPTION`` and ``run(ctx)`` returning its results and checked :class:`Claim` values."""
from ._common import Claim as Claim
from ._common import Context as Context
from ._common import claim as claim
from ._common import to_jsonable as to_jsonable

__all__ = ["Claim", "Context", "claim", "to_jsonable"]
