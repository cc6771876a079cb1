"""FACT (Framework for Agentic CUTLASS Transpilation): Python front end."""
from fact.graph_capture import capture
from fact.graph_writer import CaptureError
from fact.compose import ComposedModule, optimize
from fact import dynamo_backend  # registers torch.compile(backend="fact")

__version__ = "0.1.0"

__all__ = ["capture", "CaptureError", "optimize", "ComposedModule", "__version__"]
