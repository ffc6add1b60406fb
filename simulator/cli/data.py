"""``privsilo data fetch``: download a dataset (or copy a local one) into the data cache."""
from __future__ import annotations

import argparse

from privsilo.simulator.errors import PrivsiloError


def cmd_data(args: argparse.Namespace) -> int:
    from privsilo.simulator.data.fetch import FETCHABLE, fetch_dataset

    if args.name not in FETCHABLE:
        raise PrivsiloError(f"data fetch: got {args.name!r}; allowed: {', '.join(FETCHABLE)}")
    path = fetch_dataset(args.name, dest=args.dir, source=args.source)
    print(f"{args.name} is ready in {path}")
    return 0
