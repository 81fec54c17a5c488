"""shapeinfer: semi-static type and symbolic-shape analysis for PyTorch models."""

from .analysis import AnalysisError, AnalysisResult, analyze  # noqa: F401

__version__ = "0.1.0"
__all__ = ["analyze", "AnalysisResult", "AnalysisError"]
