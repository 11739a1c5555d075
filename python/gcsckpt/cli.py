"""The `gcsckpt` command line (`python -m gcsckpt`, or the `gcsckpt` script of the wheel).

    gcsckpt ls gs://bucket/run                  steps, bytes, objects, complete or not, age
    gcsckpt rm gs://bucket/run --keep-latest K  delete all but the K newest complete steps
    gcsckpt gc gs://bucket/run                  delete data objects no committed .metadata names
    gcsckpt verify gs://bucket/run/step-N       every byte against its block checksums

`rm` and `gc` are dry runs (they print what they would delete) unless `--yes`. Every command
prints a table on stdout, or JSON with `--json`; long deletions show a progress bar on stderr
(rich). Steps are those of `gcsckpt.dcp.steps` (the library's one definition of a complete step).
`verify` reads every byte of the step's data objects against the CRC-32Cs recorded at save time
(`gcsckpt.dcp.verify.verify_checkpoint`, the range reader's own check); objects saved without
checksums are listed as unverified. Exit status: 0, or 1 with the error (naming the object) on
stderr, and for `verify` on any mismatch or missing, short or changed object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from gcsckpt.dcp.steps import (
    StepInfo,
    delete_step,
    list_steps,
    retention_plan,
    unnamed_data_objects,
)
from gcsckpt.dcp.verify import VerifyResult, verify_checkpoint
from gcsckpt.io.objects import ObjectStore


def _age(updated: float | None, now: float) -> str:
    if updated is None:
        return "-"
    seconds = max(0.0, now - updated)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def _row(info: StepInfo, now: float) -> dict:
    return {
        "step": info.step,
        "url": info.url,
        "bytes": info.bytes,
        "objects": len(info.objects),
        "complete": info.complete,
        "committed": info.committed,
        "problem": info.problem,
        "age_s": None if info.updated is None else round(max(0.0, now - info.updated), 3),
    }


def _table(header: Sequence[str], rows: list[Sequence[object]]) -> str:
    cells = [list(map(str, header))] + [list(map(str, row)) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def _progress(items: list, label: str, quiet: bool):
    """`items`, with a rich progress bar on stderr when there are many and stderr is a tty."""
    if quiet or len(items) < 2 or not sys.stderr.isatty():
        return items
    from rich.progress import track

    return track(items, description=label, transient=True, console=None)


def cmd_ls(store: ObjectStore, args: argparse.Namespace) -> int:
    now = time.time()
    infos = list_steps(store, args.root)
    if args.json:
        print(json.dumps({"root": args.root, "steps": [_row(i, now) for i in infos]}, indent=1))
        return 0
    rows = [
        (
            f"step-{i.step}",
            i.bytes,
            len(i.objects),
            "yes" if i.complete else "no",
            _age(i.updated, now),
            i.problem,
        )
        for i in infos
    ]
    print(_table(("step", "bytes", "objects", "complete", "age", "problem"), rows))
    return 0


def cmd_rm(store: ObjectStore, args: argparse.Namespace) -> int:
    now = time.time()
    infos = list_steps(store, args.root)
    doomed = retention_plan(infos, keep_latest=args.keep_latest, keep_every=args.keep_every)
    deleted = []
    if args.yes:
        for info in _progress(doomed, "deleting steps", args.json):
            delete_step(store, info)
            deleted.append(info.step)
    if args.json:
        rows = [_row(i, now) for i in doomed]
        print(json.dumps({"root": args.root, "dry_run": not args.yes, "steps": rows}, indent=1))
        return 0
    verb = "deleted" if args.yes else "would delete (dry run; --yes deletes)"
    print(f"{verb}: {len(doomed)} step(s) under {args.root}")
    rows = [
        (f"step-{i.step}", i.bytes, len(i.objects), "yes" if i.complete else "no") for i in doomed
    ]
    if rows:
        print(_table(("step", "bytes", "objects", "complete"), rows))
    return 0


def cmd_gc(store: ObjectStore, args: argparse.Namespace) -> int:
    now = time.time()
    infos = list_steps(store, args.root)
    found = [
        obj
        for obj in unnamed_data_objects(infos)
        if obj.updated is None or now - obj.updated >= args.min_age_s
    ]
    bucket = args.root[len("gs://") :].split("/", 1)[0]
    if args.yes:
        for obj in _progress(found, "deleting objects", args.json):
            store.delete(bucket, obj.name)
    if args.json:
        rows = [{"url": f"gs://{bucket}/{o.name}", "bytes": o.size} for o in found]
        print(json.dumps({"root": args.root, "dry_run": not args.yes, "objects": rows}, indent=1))
        return 0
    verb = "deleted" if args.yes else "would delete (dry run; --yes deletes)"
    total = sum(o.size for o in found)
    print(f"{verb}: {len(found)} data object(s), {total} bytes, that no committed .metadata names")
    rows = [(f"gs://{bucket}/{o.name}", o.size, _age(o.updated, now)) for o in found]
    if rows:
        print(_table(("object", "bytes", "age"), rows))
    return 0


class _VerifyBar:
    """A rich progress bar of bytes verified on stderr (a tty only), made at the first report."""

    def __init__(self, quiet: bool) -> None:
        self.enabled = not quiet and sys.stderr.isatty()
        self.bar = self.task = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

            self.bar = Progress(
                "verifying",
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.bar.add_task("verify", total=total)
            self.bar.start()
        self.bar.update(self.task, completed=done)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _print_verify(result: VerifyResult) -> None:
    rows = [
        (
            o.path,
            "-" if o.generation is None else o.generation,
            "-" if o.size is None else o.size,
            o.bytes_verified,
            len(o.mismatches),
            o.status,
        )
        for o in result.objects
    ]
    header = ("object", "generation", "bytes", "verified", "mismatches", "status")
    print(_table(header, rows))
    unverified = sum(1 for o in result.objects if not o.checksummed)
    print(
        f"{result.url}: {len(result.objects)} object(s), {result.bytes_verified} bytes verified,"
        f" {result.bytes_unverified} bytes unverified ({unverified} object(s) saved without"
        f" checksums), {len(result.mismatches)} mismatch(es): {'OK' if result.ok else 'FAILED'}"
    )


def cmd_verify(store: ObjectStore, args: argparse.Namespace) -> int:
    bar = _VerifyBar(args.json)
    try:
        result = verify_checkpoint(
            args.checkpoint,
            endpoint=args.endpoint,
            check_commit_order=not args.no_commit_order,
            progress=bar,
        )
    finally:
        bar.stop()
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        _print_verify(result)
    for obj in result.objects:
        for line in [*map(str, obj.mismatches), *obj.problems]:
            print(f"gcsckpt verify: {line}", file=sys.stderr)
    return 0 if result.ok else 1


def parser() -> argparse.ArgumentParser:
    """The command line's argparse parser."""
    top = argparse.ArgumentParser(
        prog="gcsckpt", description="A training run's checkpoints under gs://bucket/run."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--endpoint", default=None, help="GCS endpoint (default: $STORAGE_EMULATOR_HOST, else GCS)"
    )
    common.add_argument("--json", action="store_true", help="JSON on stdout instead of a table")
    sub = top.add_subparsers(dest="command", required=True)
    ls = sub.add_parser(
        "ls", parents=[common], help="the run's steps: bytes, objects, complete or not, age"
    )
    ls.add_argument("root", help="gs://bucket/run")
    ls.set_defaults(run=cmd_ls)
    rm = sub.add_parser(
        "rm", parents=[common], help="delete all but the K newest complete steps (dry run)"
    )
    rm.add_argument("root", help="gs://bucket/run")
    rm.add_argument("--keep-latest", type=int, required=True, help="complete steps to keep, K>=1")
    rm.add_argument("--keep-every", type=int, default=None, help="also keep steps N %% M == 0")
    rm.add_argument("--yes", action="store_true", help="delete (default: only print)")
    rm.set_defaults(run=cmd_rm)
    gc = sub.add_parser(
        "gc", parents=[common], help="delete data objects no committed .metadata names (dry run)"
    )
    gc.add_argument("root", help="gs://bucket/run")
    gc.add_argument(
        "--min-age-s",
        type=float,
        default=3600.0,
        help="only objects at least this old (seconds; default 3600: a save may be in flight)",
    )
    gc.add_argument("--yes", action="store_true", help="delete (default: only print)")
    gc.set_defaults(run=cmd_gc)
    verify = sub.add_parser(
        "verify",
        parents=[common],
        help="read every byte of a step against its block checksums (exit 1 on any mismatch)",
    )
    verify.add_argument("checkpoint", help="gs://bucket/run/step-N")
    verify.add_argument(
        "--no-commit-order",
        action="store_true",
        help="accept data objects newer than .metadata (a checkpoint copied object by object)",
    )
    verify.set_defaults(run=cmd_verify)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0, or 1 after printing the error)."""
    args = parser().parse_args(argv)
    if getattr(args, "keep_latest", 1) is not None and getattr(args, "keep_latest", 1) < 1:
        print("gcsckpt: --keep-latest must be >= 1", file=sys.stderr)
        return 2
    try:
        with ObjectStore(args.endpoint) as store:
            return args.run(store, args)
    except (OSError, ValueError) as exc:  # ObjectStoreError is an OSError; names the object
        print(f"gcsckpt {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
