"""inferline's GPU preflight: the node's NVIDIA driver against the image's CUDA version.

``python -m inferline_preflight [--cuda 12.6] [--require-gpu] [--strict]``; see ``__main__``.
"""
