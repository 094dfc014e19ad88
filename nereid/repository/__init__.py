"""The model repository: folders on disk, version policies, loading and the state of every model."""

from nereid.repository.manager import ModelManager, ModelState
from nereid.repository.model import ModelVersion

__all__ = ["ModelManager", "ModelState", "ModelVersion"]
