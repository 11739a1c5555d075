"""The worker container image of --config=rbe: built from tools/rbe/Dockerfile and pushed to a
registry your REAPI service can pull from. Change this one line to your image's digest."""

WORKER_IMAGE = "docker://gcsckpt-rbe-worker:latest"
