"""kvoffload inside vLLM: an OffloadingSpec and a KV connector (these modules import vllm)."""
