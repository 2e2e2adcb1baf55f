"""The Dask runner: each trial is a task on a ``dask.distributed`` worker that owns one GPU.

``DaskRunner(workers=N)`` starts a local cluster of N worker processes, one trial at a time each, worker ``i``
pinned to GPU ``i`` (``CUDA_VISIBLE_DEVICES``, set for the trial's notebook kernel). ``DaskRunner(scheduler=
"tcp://HOST:8786")`` uses a cluster already running, whose workers were started one per GPU and pinned by whoever
started them (``CUDA_VISIBLE_DEVICES=1 dask worker tcp://HOST:8786 --nworkers 1 --nthreads 1``), on this host
or others with liger-perf installed (the kernel's files travel with each task).

A task carries the variant's (and the current best's) source, runs the trial with the Papermill runner in a
scratch folder of its worker and returns the notebook; the client writes it into the store under the number it
took. So a worker that dies mid-trial leaves nothing behind: the scheduler runs the task again on another
worker (up to ``distributed.scheduler.allowed-failures`` times), and only the one notebook that comes back is
written: a trial is never lost and never counted twice. A trial whose every worker died is recorded as a
harness error (the variant runs in the notebook's kernel process, never in the worker, so a worker's death is
the machine's fault, not the variant's).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from liger_perf.kernel.registry import KERNELS_ENV
from liger_perf.run import TrialRun, file_trial
from liger_perf.record.schema import TrialRequest
from liger_perf.record.store import Store


def _mode_on_worker(device: str) -> str:
    from liger_perf.run.papermill import PapermillRunner

    return PapermillRunner().mode(device)


def _fingerprint_on_worker(device: str) -> dict:
    from liger_perf.run.papermill import PapermillRunner

    return PapermillRunner().fingerprint(device)


def _sandbox_missing_on_worker() -> str:
    from liger_perf.isolation import sandbox

    return sandbox.unavailable_reason()


class NoSandboxOnWorker(RuntimeError):
    """A trial that may run only inside the sandbox reached a worker that has none."""


def _trial_on_worker(request: dict, variant_source: str, against_source: str | None, pin_gpu: bool,
                     sandbox_required: bool = False, screen_sources: list[str] | None = None,
                     kernel_files: dict[str, str] | None = None) -> str:
    """Run one trial on this worker; its notebook as text. A trial that needs the sandbox is refused by a worker
    without one (one that joined after the runner checked them all), before its variant is written.
    ``kernel_files``: the kernel's spec.py and baseline.py as the client's workspace has them, so that a worker
    on another host (without that workspace) runs the same kernel."""
    from liger_perf.run.papermill import PapermillRunner

    missing = _sandbox_missing_on_worker()
    if sandbox_required and missing:
        raise NoSandboxOnWorker(f"this worker has no sandbox ({missing}), and the trial runs generated code")
    if pin_gpu:  # a worker of a cluster this runner started: worker i owns GPU i
        from distributed import get_worker

        os.environ["CUDA_VISIBLE_DEVICES"] = str(get_worker().name)
    with tempfile.TemporaryDirectory(prefix="liger-perf-trial-") as scratch:
        scratch = Path(scratch)
        variant = scratch / "variant.py"
        variant.write_text(variant_source)
        against = ""
        if against_source is not None:
            (scratch / "against.py").write_text(against_source)
            against = str(scratch / "against.py")
        screen = []  # a screening's candidates, each written beside the variant
        for i, (entry, source) in enumerate(zip(request.get("screen") or [], screen_sources or [])):
            (scratch / f"candidate-{i}.py").write_text(source)
            screen.append({**entry, "variant": str(scratch / f"candidate-{i}.py")})
        local = TrialRequest.model_validate({**request, "variant": str(variant), "against": against,
                                             "screen": screen})
        saved = os.environ.get(KERNELS_ENV)
        if kernel_files:  # found first (LIGER_PERF_KERNELS), by this process and the trial's processes
            folder = scratch / "kernels" / local.kernel
            folder.mkdir(parents=True)
            for name, text in kernel_files.items():
                (folder / name).write_text(text)
            os.environ[KERNELS_ENV] = os.pathsep.join(filter(None, [str(folder.parent), saved]))
        try:
            run = PapermillRunner().run(local, Store(scratch / "notebooks", scratch / "reports"))
        finally:
            if kernel_files:
                if saved is None:
                    os.environ.pop(KERNELS_ENV, None)
                else:
                    os.environ[KERNELS_ENV] = saved
        return run.notebook.read_text(encoding="utf-8")


class DaskRunner:
    """``sandbox_required``: the trials run code a model wrote, so every worker must have the sandbox of its own
    host (each worker decides by itself whether it sandboxes; a remote one may lack ``bwrap``). Checked on every
    worker when the runner starts, and again by each task on the worker that runs it."""

    def __init__(self, workers: int | None = None, scheduler: str | None = None, sandbox_required: bool = False):
        from distributed import Client, LocalCluster

        if scheduler:
            try:
                self.client, self.pin_gpus = Client(scheduler), False
            except (OSError, ValueError, TypeError) as e:  # no such address, nothing listening there, a timeout
                from liger_perf.core.errors import UserError

                first = (str(e).splitlines() or [type(e).__name__])[0]
                raise UserError(f"--scheduler {scheduler}: no Dask scheduler reached ({first}): give its address "
                                "as tcp://HOST:8786 with `dask scheduler` running there") from None
        else:
            # The dashboard on a free port: None does not turn it off (dask/distributed#8136) and the default
            # port warns whenever another cluster holds it.
            cluster = LocalCluster(n_workers=workers or 1, threads_per_worker=1, processes=True,
                                   dashboard_address=":0")
            self.client, self.pin_gpus = Client(cluster), True
        self.workers = max(1, len(self.client.scheduler_info()["workers"]))
        self._modes: dict[str, str] = {}
        self.sandbox_required = sandbox_required
        if sandbox_required:
            self._check_sandboxes()

    def _check_sandboxes(self) -> None:
        from liger_perf.core.errors import UserError

        missing = {worker: reason for worker, reason in self.client.run(_sandbox_missing_on_worker).items()
                   if reason}
        if missing:
            worker, reason = next(iter(missing.items()))
            self.close()
            raise UserError(f"{len(missing)} of the Dask cluster's workers have no sandbox (worker {worker}: "
                            f"{reason}), and the trials run generated code: install bubblewrap on their hosts, "
                            "or pass --unsandboxed to run it there with the workers' permissions")

    def close(self) -> None:
        cluster = getattr(self.client, "cluster", None)
        self.client.close()
        if cluster is not None:
            cluster.close()

    def fingerprint(self, device: str) -> dict:
        """Read on a worker: its stack is the one the trials record, not the client's."""
        return self.client.submit(_fingerprint_on_worker, device, pure=False).result()

    def mode(self, device: str) -> str:
        """Asked of a worker: the client may sit on a machine without the workers' GPUs."""
        if device not in self._modes:
            self._modes[device] = self.client.submit(_mode_on_worker, device, pure=False).result()
        return self._modes[device]

    def run(self, request: TrialRequest, store: Store) -> TrialRun:
        return self.run_many([request], store)[0]

    def run_many(self, requests: list[TrialRequest], store: Store) -> list[TrialRun]:
        from liger_perf.kernel.variants import read_source

        from liger_perf.kernel.registry import kernel_folder

        kernels = {kernel: {name: (kernel_folder(kernel) / name).read_text(encoding="utf-8")
                            for name in ("spec.py", "baseline.py")} for kernel in {r.kernel for r in requests}}
        futures = [self.client.submit(_trial_on_worker, r.model_dump(mode="json"), read_source(r.variant),
                                      read_source(r.against) if r.against else None, self.pin_gpus,
                                      self.sandbox_required, [read_source(e.variant) for e in r.screen],
                                      kernels[r.kernel], pure=False,
                                      key=f"trial-{r.kernel}-{r.trial_id:04d}-{os.urandom(4).hex()}")
                   for r in requests]
        return [self._record(request, future, store) for request, future in zip(requests, futures)]

    def _record(self, request: TrialRequest, future, store: Store) -> TrialRun:
        import nbformat

        from liger_perf.record import notebook as record
        from liger_perf.run.papermill import record_harness_error

        try:
            text = future.result()
        except Exception as e:  # every worker it ran on died (KilledWorker), or the cluster went away
            return record_harness_error(request, store, f"the harness failed before the variant was imported: "
                                        f"the Dask task failed: {type(e).__name__}: {e}",
                                        self._modes.get(request.device, request.device))
        nb = nbformat.reads(text, as_version=4)
        return file_trial(nb, record.read_result(nb), request, store)  # the worker ran scratch copies
