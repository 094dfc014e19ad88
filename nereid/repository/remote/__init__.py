"""Model repositories in object storage (S3, Google Cloud Storage, Azure Blob), mirrored to local folders."""

from nereid.repository.remote.location import is_remote
from nereid.repository.remote.mirror import RepositoryMirror

__all__ = ["RepositoryMirror", "is_remote"]
