"""``python -m jaxcrawl.scrapy.run --state S --seeds FILE --policy P --budget R --days D ...``:
one crawl by :func:`jaxcrawl.scrapy.run_crawl` in its own process; the last line printed is the
run's summary as JSON."""
from __future__ import annotations

__all__: list = []

if __name__ == "__main__":
    import sys

    from jaxcrawl.scrapy._run import main

    sys.exit(main())
