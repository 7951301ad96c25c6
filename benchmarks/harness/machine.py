"""What a benchmark's numbers were measured on: the machine and its load.

Shared by every benchmark that writes a ``meta`` record (``run``, ``distributed``,
``cost_accuracy``), so that none imports another's entry point for it.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from benchmarks.harness import hf_models


def machine() -> dict[str, object]:
    """What the numbers were measured on."""
    import torch

    cpu = platform.processor()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        names = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    info: dict[str, object] = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    if hf_models.available():
        import transformers

        info["transformers"] = transformers.__version__
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages (None where the system has none): a loaded machine
    is why a figure may differ from run to run."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
