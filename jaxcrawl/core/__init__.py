"""The heart: problem, objectives, the one solve, bounds and caps (exported by ``jaxcrawl``)."""
__all__: list[str] = []
