"""mrgrpo.preflight: the run script's checks of the GPU stack and the data, before Ray starts."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mrgrpo import preflight

PINS = {"verl": "0.9.1", "vllm": "0.24.0", "torch": "2.11.0"}


def versions(**have):
    return lambda dist: have.get(dist)


def test_the_pins_come_from_the_gpu_extra_of_the_checkouts_pyproject(repo_root):
    requires = preflight.checkout_requires(repo_root / "pyproject.toml")
    assert preflight.gpu_pins(requires) == PINS


def test_a_matching_stack_passes_and_a_local_build_tag_does_not_matter():
    ok = versions(torch="2.11.0+cu130", verl="0.9.1", vllm="0.24.0")
    assert preflight.stack_problem("vllm", PINS, ok) == ""


@pytest.mark.parametrize("have, words", [
    (dict(torch="2.13.0+cpu", verl="0.9.1", vllm="0.24.0"),
     "torch 2.13.0+cpu is installed but mrgrpo pins torch==2.11.0"),
    (dict(torch="2.11.0", verl="0.9.1"), "vllm is not installed"),
    (dict(torch="2.11.0", verl="0.10.0", vllm="0.24.0"), "verl 0.10.0 is installed but mrgrpo pins verl==0.9.1"),
])
def test_a_missing_or_mismatched_piece_is_one_line_with_the_install_command(have, words):
    line = preflight.stack_problem("vllm", PINS, versions(**have))
    assert words in line and "pip install -e '.[gpu]'" in line and "\n" not in line


def test_sglang_is_checked_instead_of_vllm_when_it_is_the_engine():
    line = preflight.stack_problem("sglang", PINS, versions(torch="2.11.0", verl="0.9.1", vllm="0.24.0"))
    assert "sglang is not installed" in line


def test_an_engine_that_fails_to_import_is_reported():
    def boom(name):
        raise OSError("libcudart.so.13: cannot open shared object file")

    line = preflight.import_problem("vllm", boom)
    assert "import vllm failed (OSError: libcudart.so.13" in line


def write(path, infos):
    pq.write_table(pa.table({"extra_info": infos}), path)
    return path


def test_teacher_rows_without_a_plan_are_named(tmp_path):
    f = write(tmp_path / "t.parquet", [{"source_id": "a", "plan": "do x", "plan_source": ""},
                                       {"source_id": "b", "plan": " ", "plan_source": ""},
                                       {"source_id": "c", "plan": "", "plan_source": "self"}])
    assert preflight.rows_without_plans(f, "teacher") == (3, ["b"])  # c plans itself
    assert preflight.rows_without_plans(f, "self") == (3, [])
    assert "1 of 3 rows" in preflight.plans_problem([f], "teacher")


def test_a_file_that_is_not_parquet_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_text("not parquet")
    with pytest.raises(preflight.PreflightError, match="not a readable parquet"):
        preflight.rows_without_plans(bad, "teacher")
    with pytest.raises(preflight.PreflightError, match="not found"):
        preflight.rows_without_plans(tmp_path / "missing.parquet", "teacher")


def test_main_reports_the_first_problem_and_exits_2(tmp_path, capsys):
    f = write(tmp_path / "t.parquet", [{"source_id": "a", "plan": "", "plan_source": ""}])
    assert preflight.main(["--plan-source", "teacher", "--data", str(f), "--no-import"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "PLAN_SOURCE=teacher" in err[0]
    assert preflight.main(["--plan-source", "teacher", "--data", str(f), "--no-import", "--warn-only"]) == 0
    assert "warning:" in capsys.readouterr().err
