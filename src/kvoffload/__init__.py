"""kvoffload: offload LLM KV-cache blocks from GPU memory to pinned CPU memory and back.

Every request's offload lifecycle is an explicit state machine (``kvoffload.lifecycles``), driven by the
scheduler (``kvoffload.offload.OffloadingScheduler``) and checked by TLA+, an explorer over the
real code and hypothesis stateful tests.
"""

__version__ = "0.1.0"
