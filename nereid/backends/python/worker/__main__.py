"""Start a Python-model worker: `python <this file> --fd N`, or `python -m nereid.backends.python.worker`.

Run by path (how the server starts it, so that an EXECUTION_ENV_PATH interpreter without Nereid installed
can run it), this folder is loaded as the package `_nereid_worker` so its modules import each other
relatively, and nothing of it lands on sys.path where model code would see it.
"""

import sys


def _main() -> int:
    if __package__:
        from .stub import main
    else:
        import importlib
        import importlib.util
        import os

        here = os.path.dirname(os.path.abspath(__file__))
        if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
            del sys.path[0]
        spec = importlib.util.spec_from_file_location(
            "_nereid_worker", os.path.join(here, "__init__.py"), submodule_search_locations=[here]
        )
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load the worker package from {here}")
        package = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = package
        spec.loader.exec_module(package)
        main = importlib.import_module("_nereid_worker.stub").main
    return int(main(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(_main())
