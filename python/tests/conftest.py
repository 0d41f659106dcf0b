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


def cuda_backends():
    """The CUDA serving backends of this build, most preferred first (empty in a CPU-only build): the
    CUDA tests run on each, as the C++ backend suite does."""
    import fp4moe
    return fp4moe.backend_ids()


def cuda_backend_params():
    """cuda_backends() for pytest.mark.parametrize; in a build without CUDA backends one parameter that
    skips with that reason (instead of pytest's bare "got empty parameter set")."""
    return cuda_backends() or [pytest.param(None, marks=pytest.mark.skip(
        reason="this fp4moe build has no CUDA backends (built with FP4MOE_CUDA=OFF or without nvcc)"))]


def cuda_layer_or_skip(make, backend):
    """make() builds a MoeLayer on `backend`. A backend whose support check says this GPU has the wrong
    architecture (e.g. cuda.sm90.prefill.v1 on an SM80 part: "needs SM ...") skips with that reason; any
    other refusal (a shape it should take, bad weights) is a failure."""
    import fp4moe
    try:
        return make()
    except fp4moe.Error as error:
        if "does not support" in str(error) and "needs SM" in str(error):
            pytest.skip(f"{backend} cannot run on this GPU: {error}")
        raise
