"""benchmarks/two_gpu_scaling.sh refuses to start without two GPUs, before it builds or launches anything."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_gpu_is_refused_before_any_work(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    work = tmp_path / "work"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks/two_gpu_scaling.sh"), str(work)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3 and "needs 2 GPUs, nvidia-smi lists 1" in proc.stderr
    assert not (work / "stages.tsv").exists()  # nothing was built or launched
