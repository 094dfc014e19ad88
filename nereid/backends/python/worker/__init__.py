"""What runs inside a Python-model worker process; standard library and numpy only (see wire.py)."""
