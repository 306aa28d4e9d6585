"""batcher: merges concurrent KServe v2 ModelInfer calls into full batches before the balancer."""
