"""Image and video decoding to the model's input tensor, shared by preprocess and middleman.

No gRPC here: :mod:`.decode` (images, OpenCV and Pillow), :mod:`.video` (sampling and the CPU
video reader, OpenCV's FFmpeg), :mod:`.upload` (a video arriving in chunks, spooled to disk and
read by FFmpeg while it arrives: the upload path both services take), :mod:`.streaming` (a
reader's chunks off the event loop) and :mod:`.settings` (the video settings both services
configure).
Needs the ``imaging`` extra.
"""
