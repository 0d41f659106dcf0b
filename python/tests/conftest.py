"""pytest setup for the fp4moe Python tests: the package must be installed (`pip install .`);
importing it from the source tree (python/fp4moe has no compiled extension) is refused clearly."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # oracle.py

try:
    import fp4moe  # noqa: F401
except ImportError as error:  # a missing build is a failure, never a skip
    raise pytest.UsageError(f"the fp4moe package is not installed ({error}); run `python3 -m pip install ./` "
                            "from the repository root first") from error

if os.environ.get("CI") == "true":
    # CI installs the format oracle (tools/install_deps.sh); there a missing one is a failure, not a skip.
    import ml_dtypes  # noqa: F401


def torch_or_skip():
    return pytest.importorskip("torch", reason="torch is not installed")


def cuda_torch_or_skip():
    torch = torch_or_skip()
    import fp4moe
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    if not fp4moe.build_info()["cuda"]:
        pytest.skip("this fp4moe build has no CUDA (built with FP4MOE_CUDA=OFF or without nvcc)")
    return torch
