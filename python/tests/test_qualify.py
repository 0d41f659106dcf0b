"""fp4moe.qualify(): runs the bundled fp4moe executable and returns the verdict as a dict."""

import subprocess

import pytest

import fp4moe
from conftest import cuda_torch_or_skip


def test_the_executable_ships_with_the_package_and_matches_the_extension():
    result = subprocess.run([fp4moe.executable(), "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == f"fp4moe {fp4moe.__version__}"


def test_qualify_needs_exactly_one_model_source():
    with pytest.raises(ValueError, match="exactly one"):
        fp4moe.qualify()
    with pytest.raises(ValueError, match="exactly one"):
        fp4moe.qualify(preset="a", model="b")


def test_qualify_without_gpu_says_why():
    if fp4moe.devices():
        pytest.skip("a GPU is visible: test_qualify_on_gpu covers this machine")
    with pytest.raises(fp4moe.QualificationUnavailable, match="nothing to qualify"):
        fp4moe.qualify(preset="tiny", max_tokens=16)


def test_qualify_errors_name_the_problem():
    with pytest.raises((RuntimeError, fp4moe.QualificationUnavailable)) as info:
        fp4moe.qualify(preset="no-such-model", max_tokens=16)
    if isinstance(info.value, RuntimeError) and not isinstance(info.value, fp4moe.QualificationUnavailable):
        assert "no-such-model" in str(info.value)


def test_qualify_on_gpu():
    cuda_torch_or_skip()
    verdict = fp4moe.qualify(preset="tiny", max_tokens=64, tokens=[1, 16, 64],
                             backends=["cuda.sm80.pipeline.v1"], timeout=600)
    assert verdict["key"]["max_tokens"] == 64 and verdict["key"]["problem"].startswith("H=")
    [backend] = verdict["backends"]
    assert backend["id"] == "cuda.sm80.pipeline.v1"
    assert backend["qualified"], backend.get("failure") or backend.get("support_reason")
    assert {b["backend"] for b in verdict["chosen"]} == {"cuda.sm80.pipeline.v1"}


def test_the_package_ships_type_stubs():
    from pathlib import Path
    package = Path(fp4moe.__file__).parent
    stub = (package / "_ext.pyi").read_text()
    assert (package / "py.typed").exists()
    for name in ("def quantize_nvfp4", "def dequantize_nvfp4", "class MoeCore", "def swizzle_scales_128x4"):
        assert name in stub, name
