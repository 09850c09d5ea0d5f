"""Private numerics and plumbing: imports nothing public; not an API."""
__all__: list[str] = []
