"""The machine under a run, lowest layer: hardware and Colab detection, the processes of a launch, the notebook
kernel (a person at it, papermill, none), the GPU-aware install, path parameters, the output folder's lock,
owner-named temporaries, checksums and index downloads, and the standard-library preflight check. Imports nothing
else from the package.
"""
