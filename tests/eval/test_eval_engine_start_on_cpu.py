"""mrgrpo.eval.engine.start_engine: a vLLM engine that fails to initialise (on a shared GPU, vLLM's start-up memory
profile counts another process's memory changes as its own) is tried once more, then fails with a message that says
what to change; other errors are not retried. Fakes only: no vLLM, no GPU."""

from __future__ import annotations

import pytest

from mrgrpo.eval.engine import EngineStartError, start_engine

INIT_FAILED = RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")


def _starter(*outcomes):
    calls = []

    def make():
        calls.append(1)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return make, calls


def test_a_failed_start_is_tried_again_after_a_wait_and_says_so():
    make, calls = _starter(INIT_FAILED, "engine")
    slept, logged = [], []
    engine = start_engine(make, what="/m", share=0.3, sleep=slept.append, log=logged.append,
                          memory=lambda: "GPU 0: 40.0 of 140.0 GiB")
    assert engine == "engine" and len(calls) == 2 and slept == [15.0]
    assert "failed to start" in logged[0] and "GPU 0: 40.0 of 140.0 GiB" in logged[0]


def test_two_failed_starts_raise_with_the_share_and_the_memory_in_use():
    make, calls = _starter(INIT_FAILED, INIT_FAILED, "never")
    with pytest.raises(EngineStartError) as err:
        start_engine(make, what="/models/sft", share=0.15, sleep=lambda s: None, log=lambda m: None,
                     memory=lambda: "GPU 0: 62.0 of 140.0 GiB")
    msg = str(err.value)
    assert len(calls) == 2 and "/models/sft" in msg and "2 times" in msg
    assert "now 0.15" in msg and "GPU 0: 62.0 of 140.0 GiB" in msg and "No available memory for the cache blocks" in msg
    assert err.value.__cause__ is INIT_FAILED


@pytest.mark.parametrize("exc", [RuntimeError("CUDA out of memory"), ValueError("bad model"), OSError("no such file")])
def test_other_errors_are_not_retried(exc):
    make, calls = _starter(exc, "engine")
    with pytest.raises(type(exc)) as err:
        start_engine(make, what="/m", share=0.3, sleep=lambda s: pytest.fail("slept"), log=lambda m: None,
                     memory=lambda: None)
    assert err.value is exc and len(calls) == 1


def test_without_nvidia_smi_the_memory_is_unknown(monkeypatch):
    from mrgrpo.eval import engine

    monkeypatch.setenv("PATH", "/nonexistent")
    assert engine.gpu_memory_in_use() is None
    make, _ = _starter(INIT_FAILED, INIT_FAILED)
    with pytest.raises(EngineStartError, match="in use before the last try: unknown"):
        start_engine(make, what="/m", share=0.3, retries=1, sleep=lambda s: None, log=lambda m: None)


def test_memory_in_use_is_read_from_nvidia_smi(tmp_path, monkeypatch):
    from mrgrpo.eval import engine

    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '0, 38912, 143771\\n1, 1024, 143771\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert engine.gpu_memory_in_use() == "GPU 0: 38.0 of 140.4 GiB; GPU 1: 1.0 of 140.4 GiB"
    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert engine.gpu_memory_in_use() is None


def test_without_flashinfer_vllms_own_sampler_is_chosen_and_said(capsys):
    from mrgrpo.eval.engine import flashinfer_sampler_setting

    env: dict[str, str] = {}
    flashinfer_sampler_setting(env, find_spec=lambda name: None)
    assert env == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    assert "flashinfer is not installed" in capsys.readouterr().err
    env = {"VLLM_USE_FLASHINFER_SAMPLER": "1"}  # the user's choice stands
    flashinfer_sampler_setting(env, find_spec=lambda name: None)
    assert env == {"VLLM_USE_FLASHINFER_SAMPLER": "1"}
    env = {}
    flashinfer_sampler_setting(env, find_spec=lambda name: object())  # installed: nothing to do
    assert env == {}
