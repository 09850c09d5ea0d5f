"""Parallel execution: pages sharded over devices, streamed from disk, spread over processes."""
