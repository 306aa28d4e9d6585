#!/bin/sh
# The stand-in's entrypoint, in the place of NVIDIA's (which sets up CUDA's forward compatibility
# and then runs the container's arguments): says what this image is, then runs them.
echo "inferline stand-in for NVIDIA's Triton image: PyTriton's tritonserver, ONNX Runtime on the CPU" >&2
exec "$@"
