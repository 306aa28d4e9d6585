"""python -m middleman: the public KServe v2 API (``classifier``, ``classifier_video``)."""

from inferline.main import run
from middleman import app
from middleman.config import PREFIX, Config

if __name__ == "__main__":
    run("middleman", Config, PREFIX, app.start, __doc__)
