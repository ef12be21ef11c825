"""Load verification: a checksum of every block the CPU tier holds, checked on every load.

A debug option of both vLLM integrations (``"verify_loads": true`` in
``kv_connector_extra_config``). When a store completes, the digest of each CPU block it wrote
(every layer's bytes, as they are in the tier) is kept with the key it was stored for. When a load
completes, the digest of each GPU block it wrote must equal the digest kept for the CPU block it
was loaded from, and the key the load names must be the key that block was stored for. Otherwise
:class:`DataIntegrity` is raised, naming the request, the key, the GPU block and the CPU block,
instead of the engine silently computing on wrong KV.

Digests are taken from the CPU copy after the store, not from the GPU source at submission: the
CPU copy is what a load reads, so a store that wrote the wrong CPU block, a tier corrupted between
store and load, a load from the wrong CPU block and a load into the wrong GPU block all show. What
no checksum can show is a store that read its GPU blocks before the engine wrote them: the tier
then holds, faithfully, the wrong bytes (the differential tests against a run without offloading
catch that).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvoffload.offload.types import OffloadKey, RequestId


class DataIntegrity(RuntimeError):
    """A loaded block's bytes are not the bytes stored for its key."""


def block_digest(layers: Sequence[torch.Tensor], block: int) -> bytes:
    """A 128-bit digest of block ``block``'s bytes over every layer (rows ``[num_blocks, ...]``)."""
    digest = hashlib.blake2b(digest_size=16)
    for layer in layers:
        row = layer[block].reshape(-1).view(torch.uint8)
        digest.update(row.cpu().numpy().tobytes())
    return digest.digest()


@dataclass(frozen=True)
class _Stored:
    key: OffloadKey | None
    digest: bytes


class LoadVerifier:
    """Digests of the CPU tier's blocks, per CPU (mover) block, for the blocks' stores and loads.

    ``gpu_layers`` and ``cpu_layers`` are the engine's and the tier's per-layer block tensors, row
    ``i`` being block ``i``. Keys are optional: an integration whose worker never sees them (vLLM's
    OffloadingConnector hands its worker block ids only) passes None and gets the byte check alone.
    """

    def __init__(self, gpu_layers: Sequence[torch.Tensor], cpu_layers: Sequence[torch.Tensor]) -> None:
        self.gpu_layers = list(gpu_layers)
        self.cpu_layers = list(cpu_layers)
        self._stored: dict[int, _Stored | None] = {}
        self.checked_blocks = 0

    def stored(self, cpu_blocks: Sequence[int], keys: Sequence[OffloadKey | None]) -> None:
        """A store wrote ``cpu_blocks`` (``keys[i]`` for ``cpu_blocks[i]``) and completed."""
        for block, key in zip(cpu_blocks, keys, strict=True):
            self._stored[block] = _Stored(key, block_digest(self.cpu_layers, block))

    def store_failed(self, cpu_blocks: Sequence[int]) -> None:
        """A failed store may have half-written ``cpu_blocks``: nothing may be loaded from them."""
        for block in cpu_blocks:
            self._stored[block] = None

    def loaded(
        self,
        what: str,
        request_id: RequestId | None,
        cpu_blocks: Sequence[int],
        gpu_blocks: Sequence[int],
        keys: Sequence[OffloadKey | None],
    ) -> None:
        """A load (``what``: "load job 7", say) copied ``cpu_blocks[i]`` into ``gpu_blocks[i]``
        for ``keys[i]`` and completed; raises DataIntegrity on the first block that is wrong."""
        for cpu_block, gpu_block, key in zip(cpu_blocks, gpu_blocks, keys, strict=True):
            stored = self._stored.get(cpu_block)
            where = (
                f"{what} of request {request_id!r}, key {_key(key)}: GPU block {gpu_block} from CPU block {cpu_block}"
            )
            if stored is None:
                raise DataIntegrity(f"DataIntegrity: {where}, which holds no completed store")
            if key is not None and stored.key is not None and stored.key != key:
                raise DataIntegrity(f"DataIntegrity: {where}, which was stored for key {_key(stored.key)}")
            if block_digest(self.gpu_layers, gpu_block) != stored.digest:
                raise DataIntegrity(f"DataIntegrity: {where}: the loaded bytes differ from the stored ones")
            self.checked_blocks += 1


def _key(key: OffloadKey | None) -> str:
    return "unknown" if key is None else f"{key:#x}"
