class TritonPythonModel:
    """Never loaded: its configuration is refused first."""
