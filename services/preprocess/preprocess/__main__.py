"""python -m preprocess: KServe v2 models ``preprocess`` (images) and ``preprocess_video``."""

import cv2

from inferline.main import run
from preprocess import app
from preprocess.choice import BackendUnavailable
from preprocess.config import PREFIX, Config

if __name__ == "__main__":
    cv2.setNumThreads(1)  # parallelism comes from our workers; OpenCV's pool would oversubscribe
    run("preprocess", Config, PREFIX, app.start, __doc__, fatal=(BackendUnavailable,))
