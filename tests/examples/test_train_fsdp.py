"""examples/train_fsdp.py: killed mid-run and restarted, it resumes from the newest complete
checkpoint (skipping a newer one without `.metadata`) and prints the same loss values, bit for
bit, as a run that was never interrupted; a rank SIGKILLed while its save's uploads are in flight
leaves the previous checkpoint untouched and no `.metadata` for the save it interrupted.

The uninterrupted run uses the example's embedded endpoint (its default). The killed and the
restarted run use `--bucket` against an endpoint this test keeps running, as GCS outlives a
killed job (STORAGE_EMULATOR_HOST points the example's clients at it); the emulator's own files
would not survive a SIGKILL mid-write, which is not what is under test.
"""

from __future__ import annotations

import signal

import pytest
from train_runs import (
    BUCKET,
    PREFIX,
    RESUME_LINE,
    SAVE_EVERY,
    STEP_LINE,
    STEPS,
    WHERE,
    Launch,
    check_interrupted,
    check_resumed,
    command,
    hold_uploads,
    losses,
    objects,
    rank_env,
    run,
    steps,
    wait_mid_save,
    wait_until,
)

from gcsckpt.testing import FaultProxy, LocalGCS

STALLED = 2 * SAVE_EVERY  # the save whose uploads the tests hold


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, str]:
    """Losses of an uninterrupted 2-rank run: {step: float.hex()}."""
    embedded = tmp_path_factory.mktemp("embedded")
    found = losses(run(command([f"--local_dir={embedded}"]), rank_env()))
    assert sorted(found) == list(range(1, STEPS + 1))
    return found


def _run_and_kill(env: dict[str, str]) -> list[str]:
    """Runs until step-4 is committed and one more step is printed, then SIGKILLs torchrun and
    every rank."""
    launch = Launch(command(WHERE), env)

    def committed() -> bool:
        lines = list(launch.lines)
        done = [i for i, line in enumerate(lines) if line.startswith("save step-4: .metadata com")]
        return bool(done) and any(STEP_LINE.match(line) for line in lines[done[0] + 1 :])

    try:
        wait_until(committed, [launch], "committed step-4 and trained on")
    finally:
        launch.kill()
    return launch.lines


def test_killed_and_restarted_run_continues_the_same_loss_curve(tmp_path, reference):
    with LocalGCS(data_dir=str(tmp_path / "objects")) as gcs:
        gcs.create_bucket(BUCKET)
        env = rank_env(gcs.env())
        # Step-8's uploads are held, so however late the kill comes (a fast machine may have
        # printed every step by then) no save after step-4 commits.
        with FaultProxy(gcs.endpoint, [hold_uploads(STALLED, "[01]")]) as proxy:
            killed = losses(_run_and_kill(rank_env({"STORAGE_EMULATOR_HOST": proxy.endpoint})))
        assert SAVE_EVERY < max(killed) <= STEPS
        assert killed == {s: reference[s] for s in killed}  # same curve up to the kill

        # An interrupted save of a later step: a data object, no .metadata (what a kill during
        # an upload leaves). The restart must skip it.
        gcs.put(BUCKET, f"{PREFIX}/step-{STEPS}/__0_0.distcp", b"partial upload")
        complete, incomplete = steps(gcs)
        assert complete and complete[-1] >= SAVE_EVERY and STEPS not in complete
        newest = complete[-1]
        # The planted step, and any save the kill interrupted before its .metadata (on a slow
        # machine the next async save may already have started uploading).
        skipped = [s for s in incomplete if s > newest]
        assert STEPS in skipped

        resumed = run(command(WHERE), env)
        matches = [m for m in map(RESUME_LINE.match, resumed) if m]
        assert len(matches) == 1, resumed[:5]
        assert (int(matches[0].group(1)), int(matches[0].group(2))) == (newest, newest)
        assert matches[0].group(3) == ", ".join(f"step-{s}" for s in skipped)
        after = losses(resumed)
        assert sorted(after) == list(range(newest + 1, STEPS + 1))
        assert after == {s: reference[s] for s in after}  # bitwise: float.hex of every loss
        assert steps(gcs)[0][-1] == STEPS  # the re-trained step replaced the partial save


def test_rank_killed_mid_save_resumes_from_the_previous_checkpoint(tmp_path, reference):
    # Rank 1's uploads of step-8 are held, so rank 0's data objects land while rank 1's are in
    # flight and .metadata waits for them; training goes on to step 12, where the loop waits
    # for the save.
    with LocalGCS(data_dir=str(tmp_path / "objects")) as gcs:
        gcs.create_bucket(BUCKET)
        with FaultProxy(gcs.endpoint, [hold_uploads(STALLED, "1")]) as proxy:
            launch = Launch(command(WHERE), rank_env({"STORAGE_EMULATOR_HOST": proxy.endpoint}))
            try:
                wait_mid_save([launch], proxy, gcs, STALLED)
                previous = objects(gcs, f"{PREFIX}/step-{SAVE_EVERY}/")
                launch.rank_process(1).send_signal(signal.SIGKILL)
                exit_status = launch.wait(timeout_s=120)  # torchrun takes rank 0 down
            finally:
                launch.kill()
        assert exit_status not in (None, 0), launch.output()
        assert losses(launch.lines) == reference  # the killed run's curve, every step
        check_interrupted(gcs, STALLED)  # rank 0's data objects, no .metadata
        assert objects(gcs, f"{PREFIX}/step-{SAVE_EVERY}/") == previous  # same generations

        check_resumed(run(command(WHERE), rank_env(gcs.env())), gcs, reference, STALLED)
