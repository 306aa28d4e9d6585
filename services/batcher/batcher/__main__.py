"""python -m batcher: forms full batches of KServe v2 ModelInfer calls before the balancer."""

from batcher import app
from batcher.config import PREFIX, Config
from inferline.main import run

if __name__ == "__main__":
    run("batcher", Config, PREFIX, app.start, __doc__)
