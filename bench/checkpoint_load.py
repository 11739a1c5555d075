"""Any cases of the catalogue, loaded with each reader: ``bazel run //bench:checkpoint_load --
--cases='load-llama*' --sweep_axes=strategy``. ``--list`` prints the selected cases."""

from ckptbench.runner.main import run

if __name__ == "__main__":
    run()
