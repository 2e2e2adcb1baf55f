"""Print an ``ab_time.py`` result as a table: each case's ratio (time over the reference's) and its simultaneous
interval for every variant and liger-kernel, the reference's share of the copy floor, then the geomean per
dispatch bucket:

    python3 scripts/ab_table.py reports/evidence/<date>-ab-.../ab.json > ab.txt
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict

from liger_perf.kernel.variants import dispatch_bucket


def main() -> None:
    data = json.load(open(sys.argv[1]))
    reference = data["reference"]
    names = [n for n in data["variants"] if n != reference] + ["liger-kernel"]
    cases: dict = defaultdict(dict)
    for row in data["rows"]:
        cases[(row["shape"], row["dtype"])][row["contender"]] = row
    print(f"time over {reference}'s (below 1: faster than it), 95 % simultaneous interval; {data['seconds']:.0f} s")
    print("shape dtype bucket | " + " | ".join(names) + f" | {reference} % of copy floor")
    logs: dict = defaultdict(lambda: defaultdict(list))
    for (shape, dtype), rows in cases.items():
        cells = []
        for name in names:
            row = rows.get(name)
            if row is None:
                cells.append("-")
                continue
            cells.append(f"{row['ratio']:.3f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]")
            logs[dispatch_bucket(shape, dtype)][name].append(math.log(row["ratio"]))
        floor = rows[reference]["bandwidth_fraction"] * 100
        print(f"{shape} {dtype} {dispatch_bucket(shape, dtype)} | " + " | ".join(cells) + f" | {floor:.0f} %")
    print("\ngeomean per bucket:")
    for name_of_bucket, per_name in sorted(logs.items()):
        means = ", ".join(f"{n} {math.exp(sum(v) / len(v)):.3f}" for n, v in per_name.items())
        print(f"{name_of_bucket}: {means}")


if __name__ == "__main__":
    main()
