"""The training benchmark: saves as a training job pays for them (``//bench:train_ckpt``).

A scaled OLMoE trains under ep or fsdp on gloo CPU ranks (real forward/backward, AdamW, a fixed
seeded batch per step) and checkpoints every K steps with one arm: no checkpoint (the control),
torch's FileSystemWriter into tmpfs (the floor), gcsckpt sync / thread / process, the peers' writers
sync / async and torch's stock FsspecWriter. ``model`` builds the trainable model, ``saving`` starts
one arm's save, ``loop`` is the rank side (the timed loop, then every checkpoint loaded back and
compared with the state at its step), ``run`` the runner side (arms interleaved per round, one job
per arm and round on fresh ranks), ``train_jobs`` the jobs it sends the ranks and ``train_rows`` the
per-arm figures and result rows. The table is ``ckptbench.publish.train_table``. Method:
docs/design.md, "Benchmark method" (Saves in a training loop).
"""
