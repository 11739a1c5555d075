"""The smallest correct REAPI v2 bot: runs leased Actions for a Remote Workers API service.

    <rbe venv python> tools/rbe/worker.py --endpoint grpc://127.0.0.1:PORT [--instance ""]

Protocol (google.devtools.remoteworkers.v1test2, from PyPI buildgrid-common): CreateBotSession
once, then UpdateBotSession in a loop (the server long-polls while the bot is idle). One lease at a
time (capacity 1); for each ACTIVE lease whose payload is an Action (or an Action digest):
  1. a fresh working folder; the Command and the input root (GetTree + BatchReadBlobs / ByteStream)
     fetched from CAS and written there (files, executable bits, symlinks, empty folders);
  2. the parent folders of the declared outputs created, as REAPI asks of a worker;
  3. the Command's arguments run with exactly its environment_variables (nothing inherited) in its
     working_directory, stdin empty, in a new process group; Action.timeout honoured (the group is
     killed and the lease reports DEADLINE_EXCEEDED); the lease is kept alive meanwhile, and a
     lease the server cancels kills the action;
  4. stdout, stderr and the declared output files / folders (as Tree messages) uploaded to CAS;
  5. the ActionResult (exit code, outputs, timestamps) put in the lease result, the lease reported
     COMPLETED; the server files it in its ActionCache (BuildGrid skips failed actions when
     configured so, see tools/rbe/buildgrid.yml);
  6. the working folder removed. Nothing is kept between actions.
Input errors (a blob missing from CAS) complete the lease with FAILED_PRECONDITION; any other
error of the bot with INTERNAL (BuildGrid retries those on another try).

Why our own bot: BuildGrid ships none, and buildbox-worker / buildbox-run-hosttools are in none of
the package registries this project may use. SHA-256 digests only.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
from buildgrid.common.protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2_grpc as re_grpc,
)
from buildgrid.common.protos.google.bytestream import bytestream_pb2, bytestream_pb2_grpc
from buildgrid.common.protos.google.devtools.remoteworkers.v1test2 import (
    bots_pb2,
    bots_pb2_grpc,
    worker_pb2,
)
from buildgrid.common.protos.google.rpc import code_pb2, status_pb2

# What this bot provides, and what //tools/rbe:worker asks for (tools/rbe/BUILD exec_properties):
# a Linux x86_64 host with the project's toolchain at the paths tools/bazel installs.
PLATFORM = {"OSFamily": "Linux", "ISA": "x86-64"}
# Leases: ACTIVE = 2, COMPLETED = 4, CANCELLED = 5 (bots.proto LeaseState); bot status OK = 1.
ACTIVE, COMPLETED, CANCELLED = bots_pb2.ACTIVE, bots_pb2.COMPLETED, bots_pb2.CANCELLED
BATCH_BYTES = (
    2 * 1024 * 1024
)  # blobs below this go in Batch{Read,Update}Blobs, above through ByteStream
CHUNK = 1024 * 1024
KEEPALIVE_S = 5.0  # UpdateBotSession while an action runs (server keepalive timeout is 60 s)
POLL_TIMEOUT_S = 30.0  # deadline of an idle UpdateBotSession (the server long-polls 80 % of it)


class MissingBlobError(Exception):
    """A digest the Action refers to is not in CAS."""


def digest_of(data: bytes) -> re_pb2.Digest:
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def file_digest(path: Path) -> re_pb2.Digest:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return re_pb2.Digest(hash=h.hexdigest(), size_bytes=size)


class Cas:
    """CAS client for one instance: reads blobs, GetTree, uploads what the server lacks."""

    def __init__(self, channel: grpc.Channel, instance: str):
        self.instance = instance
        self.cas = re_grpc.ContentAddressableStorageStub(channel)
        self.bytestream = bytestream_pb2_grpc.ByteStreamStub(channel)

    def read(self, digests: list[re_pb2.Digest]) -> dict[str, bytes]:
        """Blobs by hash; raises MissingBlobError naming the first absent digest."""
        # The empty blob is in every CAS by definition; clients never upload it.
        out: dict[str, bytes] = {d.hash: b"" for d in digests if d.size_bytes == 0}
        todo = {d.hash: d for d in digests if d.hash not in out}
        small = [d for d in todo.values() if d.size_bytes < BATCH_BYTES]
        for batch in batches(small):
            resp = self.cas.BatchReadBlobs(
                re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=batch)
            )
            for r in resp.responses:
                if r.status.code != code_pb2.OK:
                    raise MissingBlobError(
                        f"{r.digest.hash}/{r.digest.size_bytes}: {r.status.message}"
                    )
                out[r.digest.hash] = r.data
        for d in todo.values():
            if d.size_bytes >= BATCH_BYTES:
                name = f"{self.instance}/blobs/{d.hash}/{d.size_bytes}".lstrip("/")
                try:
                    chunks = self.bytestream.Read(bytestream_pb2.ReadRequest(resource_name=name))
                    out[d.hash] = b"".join(c.data for c in chunks)
                except grpc.RpcError as e:
                    if e.code() == grpc.StatusCode.NOT_FOUND:
                        raise MissingBlobError(f"{d.hash}/{d.size_bytes}") from e
                    raise
        return out

    def tree(self, root: re_pb2.Digest) -> dict[str, re_pb2.Directory]:
        """Every Directory under `root` by hash (GetTree, all pages)."""
        dirs: dict[str, re_pb2.Directory] = {}
        if root.size_bytes == 0:
            dirs[root.hash] = re_pb2.Directory()
            return dirs
        token = ""
        while True:
            req = re_pb2.GetTreeRequest(
                instance_name=self.instance, root_digest=root, page_token=token
            )
            for page in self.cas.GetTree(req):
                for d in page.directories:
                    dirs[digest_of(d.SerializeToString()).hash] = d
                token = page.next_page_token
            if not token:
                break
        if root.hash not in dirs:
            raise MissingBlobError(f"input root {root.hash}/{root.size_bytes}")
        return dirs

    def upload(self, blobs: dict[str, tuple[re_pb2.Digest, bytes | Path]]) -> None:
        """Uploads the blobs (bytes, or a file to stream) that FindMissingBlobs reports absent."""
        blobs = {h: b for h, b in blobs.items() if b[0].size_bytes > 0}
        if not blobs:
            return
        missing = self.cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(
                instance_name=self.instance, blob_digests=[d for d, _ in blobs.values()]
            )
        ).missing_blob_digests
        small: list[re_pb2.BatchUpdateBlobsRequest.Request] = []
        for d in missing:
            digest, src = blobs[d.hash]
            if digest.size_bytes < BATCH_BYTES:
                data = src if isinstance(src, bytes) else Path(src).read_bytes()
                small.append(re_pb2.BatchUpdateBlobsRequest.Request(digest=digest, data=data))
            else:
                self.write_stream(digest, src)
        for batch in batches(small, key=lambda r: r.digest.size_bytes):
            resp = self.cas.BatchUpdateBlobs(
                re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance, requests=batch)
            )
            for r in resp.responses:
                if r.status.code != code_pb2.OK:
                    raise RuntimeError(f"CAS refused {r.digest.hash}: {r.status.message}")

    def write_stream(self, digest: re_pb2.Digest, src: bytes | Path) -> None:
        name = f"{self.instance}/uploads/{uuid.uuid4()}/blobs/{digest.hash}/{digest.size_bytes}"
        name = name.lstrip("/")

        def requests():
            offset = 0
            with contextlib.ExitStack() as stack:
                f = None if isinstance(src, bytes) else stack.enter_context(open(src, "rb"))
                while True:
                    chunk = src[offset : offset + CHUNK] if f is None else f.read(CHUNK)
                    last = offset + len(chunk) >= digest.size_bytes
                    yield bytestream_pb2.WriteRequest(
                        resource_name=name, write_offset=offset, data=chunk, finish_write=last
                    )
                    offset += len(chunk)
                    if last:
                        return

        self.bytestream.Write(requests())


def batches(items: list, key=lambda d: d.size_bytes, limit: int = BATCH_BYTES):
    """Splits items into lists whose summed `key` stays under `limit` (one item may exceed it)."""
    batch, total = [], 0
    for item in items:
        if batch and total + key(item) > limit:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += key(item)
    if batch:
        yield batch


def materialize(cas: Cas, root: re_pb2.Digest, dest: Path) -> None:
    """Writes the input root `root` under `dest`."""
    dirs = cas.tree(root)
    files: list[tuple[Path, re_pb2.FileNode]] = []
    stack = [(dest, dirs[root.hash])]
    while stack:
        path, d = stack.pop()
        path.mkdir(parents=True, exist_ok=True)
        for f in d.files:
            files.append((path / f.name, f))
        for s in d.symlinks:
            os.symlink(s.target, path / s.name)
        for sub in d.directories:
            if sub.digest.hash not in dirs:
                raise MissingBlobError(f"directory {sub.digest.hash}/{sub.digest.size_bytes}")
            stack.append((path / sub.name, dirs[sub.digest.hash]))
    blobs = cas.read([f.digest for _, f in files])
    for path, f in files:
        path.write_bytes(blobs[f.digest.hash])
        path.chmod(0o755 if f.is_executable else 0o644)


def collect_outputs(cas: Cas, cwd: Path, command: re_pb2.Command, result: re_pb2.ActionResult):
    """Uploads the declared outputs that exist and records them in `result`."""
    blobs: dict[str, tuple[re_pb2.Digest, bytes | Path]] = {}
    out_files = list(command.output_files)
    out_dirs = list(command.output_directories)
    if command.output_paths:  # REAPI v2.1: one list, the type found on disk
        out_files, out_dirs = [], []
        for p in command.output_paths:
            (out_dirs if (cwd / p).is_dir() else out_files).append(p)
    for rel in out_files:
        path = cwd / rel
        if not path.is_file():
            continue
        d = file_digest(path)
        blobs[d.hash] = (d, path)
        result.output_files.add(path=rel, digest=d, is_executable=os.access(path, os.X_OK))
    for rel in out_dirs:
        path = cwd / rel
        if not path.is_dir():
            continue
        tree = re_pb2.Tree()
        tree.root.CopyFrom(directory_message(path, tree, blobs))
        data = tree.SerializeToString()
        d = digest_of(data)
        blobs[d.hash] = (d, data)
        result.output_directories.add(path=rel, tree_digest=d)
    cas.upload(blobs)


def directory_message(path: Path, tree: re_pb2.Tree, blobs: dict) -> re_pb2.Directory:
    """The Directory for `path` (symlinks followed), its subfolders appended to tree.children."""
    msg = re_pb2.Directory()
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.is_dir():
            child = directory_message(Path(entry.path), tree, blobs)
            tree.children.append(child)
            data = child.SerializeToString()
            msg.directories.add(name=entry.name, digest=digest_of(data))
        elif entry.is_file():
            d = file_digest(Path(entry.path))
            blobs[d.hash] = (d, Path(entry.path))
            msg.files.add(name=entry.name, digest=d, is_executable=os.access(entry.path, os.X_OK))
    return msg


class Bot:
    """One bot session; run_forever() serves leases until SIGTERM / SIGINT."""

    def __init__(self, endpoint: str, instance: str, name: str):
        target = endpoint.removeprefix("grpc://")
        self.channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.max_receive_message_length", 64 << 20),
                ("grpc.max_send_message_length", 64 << 20),
            ],
        )
        self.bots = bots_pb2_grpc.BotsStub(self.channel)
        self.cas = Cas(self.channel, instance)
        self.instance = instance
        self.name = name
        self.stopping = False
        self.busy = False  # an action is running: a signal stops it at the next keepalive
        self.session: bots_pb2.BotSession | None = None

    def log(self, msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {self.name}: {msg}", file=sys.stderr, flush=True)

    def run_forever(self) -> None:
        worker = worker_pb2.Worker()
        device = worker.devices.add(handle=f"{socket.gethostname()}-{self.name}")
        for key, value in PLATFORM.items():
            device.properties.add(key=key, value=value)
        session = bots_pb2.BotSession(
            bot_id=f"{socket.gethostname()}-{self.name}-{os.getpid()}",
            status=bots_pb2.OK,
            worker=worker,
        )
        self.session = self.bots.CreateBotSession(
            bots_pb2.CreateBotSessionRequest(parent=self.instance, bot_session=session),
            timeout=POLL_TIMEOUT_S,
        )
        self.log(f"session {self.session.name}")
        while not self.stopping:
            for lease in self.session.leases:
                if lease.state == ACTIVE:
                    self.busy = True
                    try:
                        self.execute(lease)
                    finally:
                        self.busy = False
                    break  # capacity 1: report it before looking at the next lease
            self.update(POLL_TIMEOUT_S)

    def update(self, timeout: float) -> None:
        try:
            self.session = self.bots.UpdateBotSession(
                bots_pb2.UpdateBotSessionRequest(name=self.session.name, bot_session=self.session),
                timeout=timeout,
            )
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise

    def lease_cancelled(self, lease_id: str) -> bool:
        for lease in self.session.leases:
            if lease.id == lease_id:
                return lease.state == CANCELLED
        return True  # the server dropped it

    def execute(self, lease: bots_pb2.Lease) -> None:
        lease_id = lease.id
        started = time.time()
        result = re_pb2.ActionResult()
        md = result.execution_metadata
        md.worker = self.name
        md.worker_start_timestamp.FromSeconds(int(started))
        status = status_pb2.Status(code=code_pb2.OK)
        work = Path(
            tempfile.mkdtemp(prefix="action-", dir=os.environ.get("GCSCKPT_RBE_WORK", None))
        )
        try:
            status = self.run_action(lease, work, result)
        except MissingBlobError as e:
            status = status_pb2.Status(
                code=code_pb2.FAILED_PRECONDITION, message=f"missing from CAS: {e}"
            )
        except Exception as e:  # noqa: BLE001 - reported to the server as INTERNAL (retried)
            status = status_pb2.Status(
                code=code_pb2.INTERNAL, message=f"{self.name}: {type(e).__name__}: {e}"
            )
        finally:
            remove_tree(work)
        md.worker_completed_timestamp.FromSeconds(int(time.time()))
        for current in self.session.leases:
            if current.id == lease_id:
                current.state = COMPLETED
                current.status.CopyFrom(status)
                current.result.Pack(result)
        self.log(
            f"lease {lease_id}: exit {result.exit_code}, status {code_pb2.Code.Name(status.code)}"
            f" {status.message} in {time.time() - started:.2f} s"
        )

    def run_action(
        self, lease: bots_pb2.Lease, work: Path, result: re_pb2.ActionResult
    ) -> status_pb2.Status:
        action = re_pb2.Action()
        if lease.payload.Is(re_pb2.Action.DESCRIPTOR):
            lease.payload.Unpack(action)
        else:
            digest = re_pb2.Digest()
            lease.payload.Unpack(digest)
            action.ParseFromString(self.cas.read([digest])[digest.hash])
        command = re_pb2.Command.FromString(
            self.cas.read([action.command_digest])[action.command_digest.hash]
        )
        platform = {
            p.name: p.value for p in (action.platform.properties or command.platform.properties)
        }
        unmet = {k: v for k, v in platform.items() if PLATFORM.get(k) != v}
        if unmet:
            return status_pb2.Status(
                code=code_pb2.FAILED_PRECONDITION,
                message=f"{self.name} provides {PLATFORM}, the action asks for {unmet}",
            )
        md = result.execution_metadata
        md.input_fetch_start_timestamp.GetCurrentTime()
        root = work / "root"
        materialize(self.cas, action.input_root_digest, root)
        md.input_fetch_completed_timestamp.GetCurrentTime()
        cwd = root / command.working_directory
        for rel in (
            list(command.output_files)
            + list(command.output_directories)
            + list(command.output_paths)
        ):
            (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        for rel in command.output_directories:
            (cwd / rel).mkdir(parents=True, exist_ok=True)
        env = {v.name: v.value for v in command.environment_variables}
        timeout = (
            action.timeout.ToTimedelta().total_seconds() if action.HasField("timeout") else None
        )
        stdout_path, stderr_path = work / "stdout", work / "stderr"
        status = status_pb2.Status(code=code_pb2.OK)
        md.execution_start_timestamp.GetCurrentTime()
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                list(command.arguments),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                wait = (
                    KEEPALIVE_S
                    if deadline is None
                    else min(KEEPALIVE_S, max(0.0, deadline - time.monotonic()))
                )
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if deadline is not None and time.monotonic() >= deadline:
                    kill_group(proc)
                    status = status_pb2.Status(
                        code=code_pb2.DEADLINE_EXCEEDED,
                        message=f"action timed out after {timeout:g} s",
                    )
                    break
                self.update(KEEPALIVE_S * 2)  # keepalive; the server may cancel the lease
                if self.lease_cancelled(lease.id) or self.stopping:
                    kill_group(proc)
                    raise RuntimeError("lease cancelled by the server")
        kill_group(proc)  # leftovers of the action's process group
        md.execution_completed_timestamp.GetCurrentTime()
        result.exit_code = proc.returncode
        md.output_upload_start_timestamp.GetCurrentTime()
        stdout, stderr = stdout_path.read_bytes(), stderr_path.read_bytes()
        result.stdout_digest.CopyFrom(digest_of(stdout))
        result.stderr_digest.CopyFrom(digest_of(stderr))
        self.cas.upload({result.stdout_digest.hash: (result.stdout_digest, stdout)})
        self.cas.upload({result.stderr_digest.hash: (result.stderr_digest, stderr)})
        collect_outputs(self.cas, cwd, command, result)
        md.output_upload_completed_timestamp.GetCurrentTime()
        return status


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def remove_tree(path: Path) -> None:
    """rm -rf, also of read-only folders an action left behind."""

    def onexc(func, p, _exc):
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            os.chmod(p, stat.S_IRWXU)
            func(p)

    shutil.rmtree(path, onexc=onexc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--endpoint", required=True, help="grpc://HOST:PORT of the Bots and CAS services"
    )
    parser.add_argument("--instance", default="", help="REAPI instance name")
    parser.add_argument(
        "--name", default="worker", help="bot name in logs and ExecutedActionMetadata"
    )
    args = parser.parse_args()
    bot = Bot(args.endpoint, args.instance, args.name)

    def on_signal(signum, _frame):
        bot.stopping = True
        if not bot.busy:  # idle in a long poll: leave now
            raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        bot.run_forever()
    except grpc.RpcError as e:
        if not bot.stopping:
            bot.log(f"lost the server: {e.code().name} {e.details()}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
