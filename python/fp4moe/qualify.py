"""qualify(): run fp4moe's backend qualification and return the verdict as a dict.

How: it runs the `fp4moe` executable shipped inside this package (fp4moe/bin/fp4moe, built by the
same CMake build as the extension, so verdict keys and build ids agree) as `fp4moe qualify ...
--json FILE` and loads FILE. An executable is needed anyway: qualification isolates every backend
in a worker child process (`fp4moe qualify-worker`), so that a crashing or hanging kernel cannot
take the caller's process (or its CUDA context) down. FP4MOE_EXECUTABLE overrides the path.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

__all__ = ["qualify", "executable", "QualificationUnavailable"]


class QualificationUnavailable(RuntimeError):
    """Nothing to qualify on this machine: no GPU visible, or a build without CUDA (exit code 2)."""


def executable() -> str:
    """Path of the fp4moe executable: $FP4MOE_EXECUTABLE, else the one installed in this package."""
    override = os.environ.get("FP4MOE_EXECUTABLE")
    path = Path(override) if override else Path(__file__).resolve().parent / "bin" / "fp4moe"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise FileNotFoundError(f"the fp4moe executable is missing at {path} "
                                "(reinstall the package with `pip install .`, or set FP4MOE_EXECUTABLE)")
    return str(path)


def qualify(preset: Optional[str] = None, model: Optional[str] = None, *, max_tokens: int = 4096,
            tokens: Optional[Sequence[int]] = None, activation: str = "W4A16",
            backends: Optional[Sequence[str]] = None, requalify: bool = False, timeout: Optional[float] = None,
            seed: Optional[int] = None, verbose: bool = False) -> Dict[str, Any]:
    """Qualify the MoE backends of this build on this GPU for a model's MoE shape (exactly one of
    `preset`, a built-in preset name, or `model`, a checkpoint directory with config.json), time
    the passing ones and return the verdict (qualify/verdict.h as JSON): key (device, driver,
    build, problem, max_tokens), created_at, backends (per backend: supported, qualified, failure,
    probes, timings) and chosen (the backend per token bucket; empty when nothing qualified).

    A cached verdict with the same key is reused unless requalify=True (with `backends` given,
    nothing is cached). MoeLayer(device="cuda", max_tokens=<same>) then follows the cached verdict.
    verbose=True lets the tool's progress and table through to stdout / stderr.
    Raises QualificationUnavailable when there is no GPU or no CUDA in this build, RuntimeError
    (with the tool's message) on any other failure.
    """
    if (preset is None) == (model is None):
        raise ValueError("qualify: give exactly one of preset=NAME or model=DIR")
    with tempfile.TemporaryDirectory(prefix="fp4moe-qualify-") as tmp:
        json_path = os.path.join(tmp, "verdict.json")
        cmd = [executable(), "qualify", "--preset" if preset is not None else "--model",
               str(preset if preset is not None else model), "--max-tokens", str(int(max_tokens)),
               "--activation", activation, "--json", json_path]
        if tokens:
            cmd += ["--tokens", ",".join(str(int(t)) for t in tokens)]
        for backend in backends or ():
            cmd += ["--backend", backend]
        if requalify:
            cmd.append("--requalify")
        if timeout is not None:
            cmd += ["--timeout", str(float(timeout))]
        if seed is not None:
            cmd += ["--seed", str(int(seed))]
        result = subprocess.run(cmd, stdin=subprocess.DEVNULL, text=True,
                                capture_output=not verbose)
        said = "\n".join(s.strip() for s in (result.stdout, result.stderr) if s and s.strip())
        if result.returncode == 2:
            raise QualificationUnavailable(said or "fp4moe qualify: nothing to qualify on this machine")
        if result.returncode not in (0, 3) or not os.path.exists(json_path):
            raise RuntimeError(f"`{' '.join(cmd)}` failed with exit code {result.returncode}"
                               + (f":\n{said[-4000:]}" if said else ""))
        with open(json_path, encoding="utf-8") as f:
            return json.load(f)
