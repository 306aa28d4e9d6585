"""inferline's demo client: load, live images/s, and top-k classification over KServe v2 gRPC."""
