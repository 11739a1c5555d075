"""End-to-end tests of the bot (worker.py) through BuildGrid (service.py) on 127.0.0.1.

Each test uploads an Action to CAS, calls Execution.Execute like Bazel does, and checks what comes
back: exit code, stdout/stderr, output files and folders, the ActionCache entry. Runs on the rbe
venv's Python 3.13 (run_with_rbe_venv.sh); unittest, as that venv has no pytest.
"""

from __future__ import annotations

import os
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).absolute().parent))
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no INFO line per closed connection

import grpc  # noqa: E402
import service  # noqa: E402
import worker  # noqa: E402
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (  # noqa: E402
    remote_execution_pb2 as re_pb2,
)
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (  # noqa: E402
    remote_execution_pb2_grpc as re_grpc,
)
from buildgrid.common.protos.google.rpc import code_pb2  # noqa: E402

# The platform //tools/rbe:worker asks for.
PLATFORM = [("ISA", "x86-64"), ("OSFamily", "Linux")]
# Three arguments with spaces, quotes and an empty one: they must arrive unchanged.
ARGS_SCRIPT = b"""#!/bin/sh
[ -f data/empty.txt ] && [ ! -s data/empty.txt ] || exit 9
printf '%s|' "$@" > out/args.txt
mkdir -p out/dir/nested
cp data/in.txt out/dir/copy.txt
printf 'deep' > out/dir/nested/deep.txt
cp data/in.txt out/exe.sh && chmod +x out/exe.sh
pwd
echo "to stderr" >&2
"""


class Client:
    """The client half of REAPI, as Bazel uses it: upload, Execute, read results."""

    def __init__(self, endpoint: str):
        channel = grpc.insecure_channel(endpoint.removeprefix("grpc://"))
        self.cas = worker.Cas(channel, "")
        self.execution = re_grpc.ExecutionStub(channel)
        self.action_cache = re_grpc.ActionCacheStub(channel)

    def put(self, data: bytes) -> re_pb2.Digest:
        d = worker.digest_of(data)
        self.cas.upload({d.hash: (d, data)})
        return d

    def put_message(self, msg) -> re_pb2.Digest:
        return self.put(msg.SerializeToString())

    def directory(self, files: dict[str, tuple[bytes, bool]]) -> re_pb2.Digest:
        """Uploads a two-level input root {"dir/name": (content, executable)}; its digest."""
        by_dir: dict[str, re_pb2.Directory] = {}
        for path, (content, executable) in sorted(files.items()):
            folder, name = path.split("/")
            node = by_dir.setdefault(folder, re_pb2.Directory()).files.add()
            node.name, node.is_executable = name, executable
            node.digest.CopyFrom(self.put(content))
        root = re_pb2.Directory()
        for folder, msg in sorted(by_dir.items()):
            root.directories.add(name=folder, digest=self.put_message(msg))
        return self.put_message(root)

    def action(self, args, env=None, files=None, outputs=(), output_dirs=(), timeout_s=None):
        command = re_pb2.Command(
            arguments=args, output_files=outputs, output_directories=output_dirs
        )
        for name, value in sorted((env or {}).items()):
            command.environment_variables.add(name=name, value=value)
        for name, value in PLATFORM:
            command.platform.properties.add(name=name, value=value)
        action = re_pb2.Action(
            command_digest=self.put_message(command),
            input_root_digest=self.directory(files or {}),
        )
        action.platform.CopyFrom(command.platform)
        if timeout_s is not None:
            action.timeout.FromSeconds(timeout_s)
        return self.put_message(action)

    def execute(
        self, action_digest: re_pb2.Digest, skip_cache_lookup=False
    ) -> re_pb2.ExecuteResponse:
        request = re_pb2.ExecuteRequest(
            instance_name="", action_digest=action_digest, skip_cache_lookup=skip_cache_lookup
        )
        last = None
        for operation in self.execution.Execute(request, timeout=120):
            last = operation
        assert last is not None and last.done, f"operation not done: {last}"
        response = re_pb2.ExecuteResponse()
        last.response.Unpack(response)
        return response

    def read(self, digest: re_pb2.Digest) -> bytes:
        return self.cas.read([digest])[digest.hash]

    def cached(self, action_digest: re_pb2.Digest) -> re_pb2.ActionResult | None:
        try:
            return self.action_cache.GetActionResult(
                re_pb2.GetActionResultRequest(instance_name="", action_digest=action_digest)
            )
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise


class WorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        state = Path(service.tempfile.mkdtemp(prefix="gcsckpt-rbe-test-", dir="/tmp"))
        state.chmod(0o711)
        cls.state = state
        cls.service = service.Service(state, workers=1)
        try:
            cls.client = Client(cls.service.start())
        except BaseException:
            cls.service.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.service.stop()
        service.shutil.rmtree(cls.state, ignore_errors=True)

    def test_action_end_to_end(self):
        c = self.client
        env = {"PATH": "/bin:/usr/bin", "GCSCKPT_ONLY": "a b", "EMPTY": ""}
        files = {
            "bin/args.sh": (ARGS_SCRIPT, True),
            "data/in.txt": (b"input bytes\n", False),
            "data/empty.txt": (b"", False),  # the empty blob: never uploaded, always there
        }
        outputs = ["out/args.txt", "out/exe.sh", "out/absent.txt"]
        args = ["bin/args.sh", "one two", "'q'", ""]
        digest = c.action(args, env, files, outputs=outputs, output_dirs=["out/dir"])

        response = c.execute(digest)
        self.assertEqual(response.status.code, code_pb2.OK, response.status.message)
        result = response.result
        self.assertEqual(result.exit_code, 0, c.read(result.stderr_digest))
        self.assertFalse(response.cached_result)
        self.assertEqual(c.read(result.stderr_digest), b"to stderr\n")
        workdir = c.read(result.stdout_digest).decode().strip()
        self.assertTrue(workdir.endswith("/root"), workdir)
        self.assertFalse(os.path.exists(workdir), "the action's folder outlived the action")

        by_path = {f.path: f for f in result.output_files}
        self.assertEqual(sorted(by_path), ["out/args.txt", "out/exe.sh"])  # absent.txt not made
        self.assertEqual(c.read(by_path["out/args.txt"].digest), b"one two|'q'||")
        self.assertFalse(by_path["out/args.txt"].is_executable)
        self.assertTrue(by_path["out/exe.sh"].is_executable)

        (out_dir,) = result.output_directories
        self.assertEqual(out_dir.path, "out/dir")
        tree = re_pb2.Tree.FromString(c.read(out_dir.tree_digest))
        self.assertEqual([f.name for f in tree.root.files], ["copy.txt"])
        self.assertEqual(c.read(tree.root.files[0].digest), b"input bytes\n")
        self.assertEqual([d.name for d in tree.root.directories], ["nested"])
        (nested,) = tree.children
        self.assertEqual(
            worker.digest_of(nested.SerializeToString()), tree.root.directories[0].digest
        )
        self.assertEqual(c.read(nested.files[0].digest), b"deep")

        # The server filed it in its ActionCache, and a second Execute is answered from there.
        self.assertEqual(c.cached(digest).output_files, result.output_files)
        again = c.execute(digest)
        self.assertTrue(again.cached_result)
        self.assertEqual(again.result.output_files, result.output_files)

    def test_environment_is_exactly_the_commands(self):
        c = self.client
        env = {"A": "1", "B": "two words"}
        response = c.execute(c.action(["/usr/bin/env"], env))
        self.assertEqual(response.result.exit_code, 0)
        self.assertEqual(c.read(response.result.stdout_digest), b"A=1\nB=two words\n")

    def test_failing_action_is_reported_not_cached(self):
        c = self.client
        digest = c.action(["/bin/sh", "-c", "echo partial; echo boom >&2; exit 3"])
        response = c.execute(digest)
        self.assertEqual(response.status.code, code_pb2.OK, response.status.message)
        self.assertEqual(response.result.exit_code, 3)
        self.assertEqual(c.read(response.result.stdout_digest), b"partial\n")
        self.assertEqual(c.read(response.result.stderr_digest), b"boom\n")
        self.assertIsNone(c.cached(digest), "a failed action was put in the ActionCache")
        again = c.execute(digest)  # runs again: nothing cached to serve
        self.assertFalse(again.cached_result)
        self.assertEqual(again.result.exit_code, 3)

    def test_timeout_kills_the_action(self):
        c = self.client
        digest = c.action(["/bin/sh", "-c", "echo started; exec sleep 600"], timeout_s=1)
        response = c.execute(digest)
        self.assertEqual(response.status.code, code_pb2.DEADLINE_EXCEEDED, response.status)
        self.assertIn("timed out after 1 s", response.status.message)
        self.assertEqual(c.read(response.result.stdout_digest), b"started\n")
        self.assertIsNone(c.cached(digest))


if __name__ == "__main__":
    unittest.main(verbosity=2)
