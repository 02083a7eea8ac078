"""Shared set-up of the model tests: one torch thread, as the engine tests (same fixture)."""
from tests.engine.conftest import _one_torch_thread  # noqa: F401  (autouse fixture, registered by import)
