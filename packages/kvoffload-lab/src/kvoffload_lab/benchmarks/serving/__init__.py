"""The serving lab: vLLM's OpenAI server (``vllm serve``) with and without offloading, spoken to over HTTP.

:mod:`.model` builds a seeded random-weight Llama and a byte-level BPE tokenizer here (nothing is
downloaded), :mod:`.server` runs one server in a process group of its own, :mod:`.prom` reads its
``/metrics``, :mod:`.configs` names the servers compared, :mod:`.workloads` and :mod:`.client` drive
them (streamed, so time to first token is measured), :mod:`.stats` and :mod:`.report` turn the
timings into the benchmark's JSON, :mod:`.plot` draws it. ``tests/vllm_serve`` and
``scripts/measure/vllm_serve_bench.py`` use it; the product never imports it.
"""
