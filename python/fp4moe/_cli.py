"""The `fp4moe` console script of the Python package: runs the bundled fp4moe executable."""

import os
import sys

from .qualify import executable


def main() -> None:
    path = executable()
    os.execv(path, [path, *sys.argv[1:]])
