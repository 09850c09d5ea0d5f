"""Regenerate the example files the docs use (pages.csv, histories.csv, caps.csv,
crawl_delays.csv, hosts.csv, robots/): ``python examples/make_example_files.py``.

Seeded, so the files are the same every time.  1,000 pages on 20 hosts, URLs as page ids,
rates per day: importance log-normal, change rates log-normal around once every few days,
4% of the pages with complete change observations (sitemaps), a few with revisit bounds.
"""
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(2019)
num_pages, num_hosts = 1000, 20
host = rng.integers(0, num_hosts, num_pages)
hosts = [f"www.site{h:02d}.example" for h in range(num_hosts)]
url = [f"https://{hosts[h]}/page{i:04d}.html" for i, h in enumerate(host)]
importance = np.round(rng.lognormal(0.0, 1.0, num_pages), 4)
change_rate = np.round(rng.lognormal(np.log(0.3), 1.0, num_pages), 4)  # changes per day
complete = (rng.random(num_pages) < 0.04).astype(int)
min_interval = np.where(rng.random(num_pages) < 0.05, 1.0, 0.0)          # at most daily
max_interval = np.where(rng.random(num_pages) < 0.05, 14.0, np.inf)      # at least every two weeks

with open(os.path.join(HERE, "pages.csv"), "w") as fh:
    fh.write("page_id,importance,change_rate,complete,min_interval,max_interval\n")
    for row in zip(url, importance, change_rate, complete, min_interval, max_interval):
        fh.write(",".join(str(v) if not isinstance(v, float) else f"{v:g}" for v in row) + "\n")

# crawl histories of 200 pages: a crawl every ~1-3 days for 6 weeks, changed if the page
# changed (Poisson) since the previous crawl
with open(os.path.join(HERE, "histories.csv"), "w") as fh:
    fh.write("page_id,interval,changed,importance\n")
    for i in range(200):
        t = 0.0
        while t < 42.0:
            w = round(float(rng.uniform(1.0, 3.0)), 4)
            changed = int(rng.random() < -np.expm1(-change_rate[i] * w))
            fh.write(f"{url[i]},{w},{changed},{importance[i]}\n")
            t += w

# host caps: every host at most 60 crawls per day, four busy hosts less -- below what they
# take in the uncapped plan of the default 200 crawls per day, so these caps bind
tight = {"www.site06.example": 8, "www.site09.example": 10, "www.site12.example": 6, "www.site19.example": 9}
with open(os.path.join(HERE, "caps.csv"), "w") as fh:
    fh.write("host_id,cap\n")
    for h in hosts:
        fh.write(f"{h},{tight.get(h, 60)}\n")

# crawl delays (seconds between two fetches of a host) and the same as robots.txt files
delays = rng.choice([300, 600, 900, 1800], num_hosts)
with open(os.path.join(HERE, "crawl_delays.csv"), "w") as fh:
    fh.write("host,crawl_delay\n")
    for h, d in zip(hosts, delays):
        fh.write(f"{h},{d}\n")
os.makedirs(os.path.join(HERE, "robots"), exist_ok=True)
for h, d in zip(hosts, delays):
    with open(os.path.join(HERE, "robots", f"{h}.txt"), "w") as fh:
        fh.write(f"User-agent: *\nCrawl-delay: {d}\nDisallow: /private/\n")

# the page -> host mapping, for page ids that are not URLs
with open(os.path.join(HERE, "hosts.csv"), "w") as fh:
    fh.write("page_id,host_id\n")
    for u, h in zip(url, host):
        fh.write(f"{u},{hosts[h]}\n")
