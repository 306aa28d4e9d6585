"""middleman: the public KServe v2 API — validation, decoding, inference, post-processing."""
