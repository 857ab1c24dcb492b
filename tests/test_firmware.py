"""The program as C source: model_pte.h/.c compile with gcc -std=c99 -Wall -Werror, hold the .pte's bytes,
and describe its I/O and planned memory as the .pte and report.json do."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

import pytest
import torch
from executorch.exir._serialize._program import deserialize_pte_binary

from imxrt import c_array
from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.errors import BadOption
from imxrt.pipeline import CompileOptions, compile

GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not installed")

MAIN = r"""
#include <stdio.h>
#include <stdint.h>
#include "model_pte.h"
int main(void) {
    const int32_t sizes[] = MODEL_PTE_INPUT0_SIZES;
    printf("%u %u %u %u %d\n", (unsigned)((uintptr_t)model_pte % MODEL_PTE_ALIGNMENT), (unsigned)MODEL_PTE_SIZE,
           (unsigned)MODEL_PTE_MEMORY_ID1_BYTES, (unsigned)model_pte_inputs[MODEL_PTE_INPUT_X].nbytes, (int)sizes[1]);
    printf("%s %s %.9g %d %d\n", model_pte_inputs[0].name, model_pte_outputs[0].dtype,
           (double)model_pte_outputs[0].scale, (int)MODEL_PTE_OUTPUT0_ZERO_POINT, model_pte_inputs[0].dim_order[3]);
    return 0;
}
"""


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 4 * 4, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@functools.cache
def compiled(io: str):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    return compile(Net().eval(), (x,), "imxrt700-cpu", [(x,)], CompileOptions(show_progress=False, io=io))


def array_bytes(source: str) -> bytes:
    body = source.split("model_pte[MODEL_PTE_SIZE] = {", 1)[1].split("};", 1)[0]
    return bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", body))


@pytest.mark.slow
@needs_gcc
@pytest.mark.parametrize("io", ["int8", "float"])
def test_c_files_compile_and_hold_the_program(tmp_path, io):
    result = compiled(io)
    result.save(tmp_path / "out", c_header=True)
    header, source = (tmp_path / "out" / "model_pte.h").read_text(), (tmp_path / "out" / "model_pte.c").read_text()
    assert array_bytes(source) == result.pte == (tmp_path / "out" / "model.pte").read_bytes()
    sizes = deserialize_pte_binary(result.pte).program.execution_plan[0].non_const_buffer_sizes
    for memory_id, size in enumerate(sizes):
        assert f"#define MODEL_PTE_MEMORY_ID{memory_id}_BYTES {size}u" in header
    assert f"#define MODEL_PTE_NUM_PLANNED_BUFFERS {len(sizes) - 1}u" in header
    subprocess.run([GCC, "-std=c99", "-Wall", "-Werror", "-c", "model_pte.c"], cwd=tmp_path / "out", check=True)
    (tmp_path / "out" / "main.c").write_text(MAIN)
    subprocess.run([GCC, "-std=c99", "-Wall", "-Werror", "-o", "main", "main.c", "model_pte.c"],
                   cwd=tmp_path / "out", check=True)
    run = subprocess.run([str(tmp_path / "out" / "main")], capture_output=True, text=True, check=True)
    lines = run.stdout.split("\n")
    given, returned = result.io["inputs"][0], result.io["outputs"][0]
    nbytes = 108 if io == "int8" else 432
    assert lines[0] == f"0 {len(result.pte)} {sizes[1]} {nbytes} 3"
    name, dtype, scale, zero_point, last_dim = lines[1].split()
    assert (name, dtype, int(zero_point), int(last_dim)) == (given["name"], returned["dtype"],
                                                             returned["zero_point"], 3)
    assert float(scale) == pytest.approx(returned["scale"], rel=1e-7)


def test_header_cli_writes_named_files_beside_the_pte(tmp_path, capsys):
    compiled("int8").save(tmp_path / "out")
    assert not (tmp_path / "out" / "model_pte.h").exists()
    assert main(["header", str(tmp_path / "out" / "model.pte"), "--name", "kws_model"]) == 0
    source = (tmp_path / "out" / "kws_model.c").read_text()
    assert array_bytes(source.replace("kws_model[KWS_MODEL_SIZE]", "model_pte[MODEL_PTE_SIZE]")) == \
        compiled("int8").pte
    assert "#define KWS_MODEL_INPUT0_ZERO_POINT" in (tmp_path / "out" / "kws_model.h").read_text()


def test_header_cli_errors_leave_nothing(tmp_path, capsys):
    compiled("int8").save(tmp_path / "out")
    pte = str(tmp_path / "out" / "model.pte")
    assert main(["header", pte, "--name", "9lives"]) == EXIT_USER_ERROR
    assert "--name" in capsys.readouterr().err
    (tmp_path / "out" / "report.json").unlink()
    assert main(["header", pte]) == EXIT_USER_ERROR
    assert "report.json" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").glob("*.[ch]")) == []
    with pytest.raises(BadOption):
        c_array.render(compiled("int8").pte, compiled("int8").io, "bad-name")


@pytest.mark.parametrize("name, accepted", [
    ("model_pte", True), ("int8", True), ("_model", True), ("intx", True),
    ("int", False), ("while", False), ("bool", False), ("_Bool", False), ("uint8_t", False), ("size_t", False),
    ("NULL", False), ("INT8_MAX", False), ("__model", False), ("_Model", False), ("9lives", False), ("a-b", False),
])
def test_the_array_name_is_a_c_identifier_no_keyword_standard_or_reserved_name(name, accepted):
    if accepted:
        c_array.check_symbol(name)
    else:
        with pytest.raises(BadOption, match=f"--name: '{name}' is not valid; use a C identifier"):
            c_array.check_symbol(name)


def test_header_cli_refuses_a_c_keyword_as_name_and_writes_nothing(tmp_path, capsys):
    compiled("int8").save(tmp_path / "out")
    before = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert main(["header", str(tmp_path / "out" / "model.pte"), "--name", "int"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--name: 'int' is not valid" in err and "not a C keyword" in err, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == before


def test_c_identifier():
    assert c_array.c_identifier("input.0-x") == "input_0_x"
    assert c_array.c_identifier("0x") == "_0x"
