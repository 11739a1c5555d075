"""The arms a run compares, by name, and the role each plays in the tables.

Kept apart from ``worker.arms`` (which builds each arm's reader or writer and imports torch and
the arms' libraries) so that what the result rows and the run config need to know, which names
exist and which is the candidate, the baseline, a peer or a reference, sits below every
sub-package that uses it: ``record`` and ``runner`` read the roles, ``worker`` builds the arms.
Pure Python, no imports.
"""

CANDIDATE = "gcsckpt"  # ours: every ratio is this arm's throughput over another's
# Ours with block checksums off (reader verify=False, writer checksum_block_bytes=0): the cost
# of verification, measured beside the candidate; a reference, never a peer. Not a default arm.
UNVERIFIED = "gcsckpt-unverified"
# Ours reading each byte range once per job and sharing it among the ranks that need it
# (reader read_once=True, default off): a reader arm only, to decide that default beside the
# candidate in the same run. A reference, never a peer. Not a default arm.
READ_ONCE = "gcsckpt-read-once"
CANDIDATES = (CANDIDATE, UNVERIFIED, READ_ONCE)  # the arms that are gcsckpt's own
# Ours through GCSCheckpointer with its node-local tier on (local_dir): a training arm only, to
# measure what the tier costs the loop beside the same mode without it.
LOCAL_TIER = "gcsckpt+local"
BASELINE = "fsspec"  # torch's stock FsspecReader / FsspecWriter over gcsfs
LOCALFS = "localfs"  # torch's stock FileSystemWriter into node-local tmpfs (writers only)
READERS = (CANDIDATE, BASELINE, "msc", "dataflux", UNVERIFIED, READ_ONCE)
WRITERS = (*(r for r in READERS if r != READ_ONCE), LOCALFS)
PEERS = ("msc", "dataflux")  # arms that are neither ours nor the stock baseline
REFERENCES = (
    LOCALFS,
    UNVERIFIED,
    READ_ONCE,
)  # floors to compare with, never peers (no "best peer" among them)
