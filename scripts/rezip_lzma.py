"""Re-zip wheels with LZMA inside the zip, in place, so that a GPU call's carry fits the device tool's 64 MiB.

    python3 scripts/rezip_lzma.py .whlt

pip reads a wheel's members with Python's zipfile, which reads LZMA members: the H200's pip installed wheels so
re-zipped from the sixth to the seventeenth session (reports/evidence/2026-12-02-loop-fused_add_rms_norm/README.md).
Nsight Compute's ncu_report is most of a trial's wheels: 17.3 MB deflated, about 11 MB so.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path


def rezip(wheel: Path) -> tuple[int, int]:
    """``wheel`` rewritten with every member LZMA-compressed, the members' names, order and bytes unchanged."""
    before = wheel.stat().st_size
    packed = wheel.with_suffix(".lzma-tmp")
    try:
        with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(packed, "w", zipfile.ZIP_LZMA) as target:
            for info in source.infolist():
                target.writestr(info, source.read(info), compress_type=zipfile.ZIP_LZMA)
        with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(packed) as target:  # what pip will read is what was
            if any(source.read(i) != target.read(i.filename) for i in source.infolist()):
                raise SystemExit(f"rezip_lzma: {wheel} did not survive the re-zip; it is left as it was")
        packed.replace(wheel)
    finally:
        packed.unlink(missing_ok=True)  # a re-zip cut short leaves the wheel as it was, and nothing beside it
    return before, wheel.stat().st_size


def main(folders: list[str]) -> None:
    if not folders:
        raise SystemExit("usage: python3 scripts/rezip_lzma.py FOLDER [FOLDER ...] (folders of .whl files)")
    for folder in folders:
        total_before = total_after = 0
        for wheel in sorted(Path(folder).glob("*.whl")):
            before, after = rezip(wheel)
            total_before, total_after = total_before + before, total_after + after
        print(f"{folder}: {total_before / 1e6:.1f} MB -> {total_after / 1e6:.1f} MB")


if __name__ == "__main__":
    main(sys.argv[1:])
