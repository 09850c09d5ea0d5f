"""The paper reproductions run by ``jaxcrawl reproduce``: one module per figure.

Each module defines ``NAME`` (its command-line name, equal to the module's name),
``DESCRIPTION`` (one line: paper, figure, what it shows) and ``run(ctx)``, which computes the
figure's numbers, draws it with :meth:`Context.savefig` and returns its parameters, results and
checked :class:`Claim` values (built with :func:`claim`).  Your own experiments follow the same
contract in a folder named by ``JAXCRAWL_EXPERIMENTS_DIR`` (see ``docs/results.md``).
"""
from ._common import Claim as Claim
from ._common import Context as Context
from ._common import claim as claim
from ._common import to_jsonable as to_jsonable

__all__ = ["Claim", "Context", "claim", "to_jsonable"]
