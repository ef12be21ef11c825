"""The engines of these tests run in this process (kvoffload_lab.vllm.common.engine.in_process_engine_env), so
the tests can read the connector's state; a test that wants an engine-core process sets
``VLLM_ENABLE_V1_MULTIPROCESSING`` itself, which wins."""

from kvoffload_lab.vllm.common.engine import in_process_engine_env

in_process_engine_env()
