"""The run side of `GCSCheckpointer` (`gcsckpt.dcp.checkpointer`): its steps and their
retention. `step_infos` / `steps` / `latest` list `root`'s `step-N` folders (after the retention
runs already started have finished), `apply_retention` deletes what `keep_latest` /
`keep_every` no longer keep (never a step a save or load holds: `_hold` / `_release`), on one
background thread (`_pool`).

`RunSteps` is a base class of GCSCheckpointer, kept apart because it is one job; it uses the
checkpointer's `root`, `keep_latest`, `keep_every`, `_shared` (endpoint, token_provider,
retry), `_lock`, `_store`, `_busy`, `_retention` and `_retention_runs`.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from gcsckpt.dcp.steps import StepInfo, delete_step, list_steps, retention_plan
from gcsckpt.io.objects import ObjectStore

log = logging.getLogger("gcsckpt.dcp.checkpointer")  # the checkpointer's one logger


class RunSteps:
    """The steps and retention half of `GCSCheckpointer` (see module doc)."""

    def _need_root(self, what: str) -> str:
        if self.root is None:
            raise ValueError(f"{what} needs GCSCheckpointer(root='gs://bucket/run')")
        return self.root

    def _object_store(self) -> ObjectStore:
        with self._lock:
            if self._store is None:
                self._store = ObjectStore(
                    self._shared.get("endpoint"),
                    token_provider=self._shared.get("token_provider"),
                    retry=self._shared.get("retry"),
                )
            return self._store

    def step_infos(self) -> list[StepInfo]:
        """Every `step-N` folder under root, newest first, complete or not (`steps.StepInfo`).

        Raises:
            ValueError: no root. ObjectStoreError: the listing or a `.metadata` read failed.
        """
        root = self._need_root("step_infos")
        self._retention_settled()
        return list_steps(self._object_store(), root)

    def _retention_settled(self) -> None:
        """Waits for the retention runs committed saves have started, so a listing shows the
        steps retention keeps (`save(..., step=5)` then `steps()` never lists a step that save
        already doomed). apply_retention logs its failures and never raises."""
        with self._lock:
            runs, self._retention_runs = self._retention_runs, []
        for run in runs:
            run.result()

    def steps(self) -> list[int]:
        """The complete steps under root, newest first: `.metadata` committed and every object
        it names present with its recorded size, after the retention runs already started have
        finished. Runs on the calling rank alone (one LIST and one `.metadata` GET per committed
        step).

        Raises:
            ValueError: no root. ObjectStoreError: the listing or a read failed.
        """
        return [info.step for info in self.step_infos() if info.complete]

    def latest(self) -> int | None:
        """The newest complete step, or None."""
        complete = self.steps()
        return complete[0] if complete else None

    # -- retention ---------------------------------------------------------------------------
    def _hold(self, url: str) -> None:
        with self._lock:
            self._busy[url] = self._busy.get(url, 0) + 1

    def _release(self, url: str) -> None:
        with self._lock:
            left = self._busy.get(url, 0) - 1
            if left > 0:
                self._busy[url] = left
            else:
                self._busy.pop(url, None)

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._retention is None:
                self._retention = ThreadPoolExecutor(1, thread_name_prefix="gcsckpt-retention")
            return self._retention

    def apply_retention(self) -> list[int]:
        """Deletes the steps `keep_latest` / `keep_every` no longer keep (never one being
        written or loaded, never one newer than the newest complete step), `.metadata` first.
        Runs on rank 0 in a background thread after each committed save; a failure is logged
        and the next save's run retries it. Returns the steps deleted."""
        if self.root is None or self.keep_latest is None:
            return []
        try:
            store = self._object_store()
            infos = list_steps(store, self.root)
            with self._lock:
                busy = {info.step for info in infos if info.url in self._busy}
            doomed = retention_plan(
                infos, keep_latest=self.keep_latest, keep_every=self.keep_every, protected=busy
            )
        except Exception as exc:
            log.warning(
                "retention under %s: listing failed (retried at the next save): %s", self.root, exc
            )
            return []
        deleted = []
        for info in doomed:
            try:
                delete_step(store, info)
                deleted.append(info.step)
            except Exception as exc:
                log.warning(
                    "retention: deleting %s failed (retried at the next save): %s", info.url, exc
                )
        return deleted
