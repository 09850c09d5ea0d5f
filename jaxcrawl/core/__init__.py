"""The heart of jaxcrawl: the problem, objectives as values, the one solve, revisit bounds
and host caps.  Its public names are exported by :mod:`jaxcrawl`."""
