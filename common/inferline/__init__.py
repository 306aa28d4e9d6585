"""Code shared by every inferline process: config, logging, metrics, gRPC bootstrap, KServe."""

__version__ = "0.1.0"
