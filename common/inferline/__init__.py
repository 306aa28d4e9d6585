"""Code shared by every inferline process: config, logging, metrics, gRPC bootstrap, KServe."""
