"""python -m batcher (the image's ``inferline-batcher``): forms full batches of KServe v2
ModelInfer calls before the balancer."""

from batcher import app
from batcher.config import PREFIX, Config
from inferline.main import run


def main() -> None:
    run("batcher", Config, PREFIX, app.start, __doc__)


if __name__ == "__main__":
    main()
