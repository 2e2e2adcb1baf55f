"""Print a kernel's baseline with knobs changed, for device.sh's gate and A/B steps:

    python3 scripts/with_knobs.py KERNEL KNOB=VALUE[,KNOB@BUCKET=VALUE...]

Each VALUE is a Python literal (8, True, 'per_row'), or else taken as a string (per_row)."""

from __future__ import annotations

import ast
import sys


def parse_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main() -> None:
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.kernel.variants import with_knobs

    kernel, changes = sys.argv[1], sys.argv[2]
    knobs = {name: parse_value(value) for name, _, value in (item.partition("=") for item in changes.split(","))}
    print(with_knobs(baseline_path(kernel).read_text(), knobs), end="")


if __name__ == "__main__":
    main()
