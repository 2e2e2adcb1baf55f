"""The kernels that ship with liger-perf: each folder ``<name>/`` holds a ``spec.py`` and a ``baseline.py``.

Installed, this folder is the package ``liger_perf.kernels`` (``pyproject.toml`` maps it); in this checkout it is
also the workspace's own ``kernels/``. The registry loads the files by path: nothing here is imported."""
