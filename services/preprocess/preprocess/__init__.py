"""preprocess: image and video decoding (DALI on GPU; DALI or OpenCV on CPU) over KServe v2."""
