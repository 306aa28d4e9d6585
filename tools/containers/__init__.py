"""Containers on a development machine: the engine (docker or podman), the stand-in base images
for bases that cannot be pulled, and the checks every image passes before a cluster runs it.

The pods themselves (the rendered manifests under podman) are :mod:`tools.pods`.
"""
