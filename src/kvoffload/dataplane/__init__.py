"""The KV offloading system's data plane (the product): what moves the bytes the control plane
(:mod:`kvoffload.offload`) decides on. The worker runs the scheduler's jobs on the block mover; the
mover copies blocks between the engine's per-layer GPU tensors and the CPU tier (host memory, the
CUDA copy paths and their calibration, the optional numba kernel); integrity checks every load
against the digest of what was stored. Its modules are imported on their own (they need torch).
From the control plane it imports only the shared vocabulary, ``kvoffload.offload.types`` and
``kvoffload.offload.errors``, never the scheduler, the manager or the policies.
"""
