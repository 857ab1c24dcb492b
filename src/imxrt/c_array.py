"""Firmware hand-off: the ``.pte`` as a C array (``model_pte.h`` / ``model_pte.c``) with what sizes the runtime.

The header gives the program's length, each model input's and output's shape, dim order, dtype, byte count,
scale and zero point (``#define``s and a const struct array), and the bytes ExecuTorch's memory plan needs
per memory id, so the firmware sizes its ``HierarchicalAllocator`` buffers from the program itself. Shapes,
dtypes, dim orders and planned sizes are read from the ``.pte``; names, scales and zero points from the
compile's ``report.json`` (the ``.pte`` does not keep them).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from executorch.exir import schema

from imxrt import writer
from imxrt.errors import BadFile, BadOption
from imxrt.output_folder import c_banner
from imxrt.pte.reader import TORCH_DTYPES, read_program, tensor_nbytes

ALIGNMENT = 16  # ExecuTorch's flatbuffer and segment alignment; also a safe DMA alignment
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The keywords of C (C89 to C23) and the names the header's own includes (stddef.h, stdint.h) define: a symbol
# spelt as one of them does not compile.
_C_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
    _Alignas _Alignof _Atomic _Bool _Complex _Decimal128 _Decimal32 _Decimal64 _Generic _Imaginary _Noreturn
    _Static_assert _Thread_local alignas alignof bool constexpr false nullptr static_assert thread_local true
    typeof typeof_unqual
    """.split())
_STANDARD_NAMES = re.compile(r"(u?int(_least|_fast)?(8|16|32|64)_t|u?int(max|ptr)_t|size_t|ptrdiff_t|wchar_t"
                             r"|max_align_t|nullptr_t|NULL|offsetof|U?INT(_LEAST|_FAST)?(8|16|32|64)_(MIN|MAX)"
                             r"|U?INT(MAX|PTR)_(MIN|MAX)|U?INT(8|16|32|64|MAX)_C|(SIZE|PTRDIFF|SIG_ATOMIC|WCHAR|WINT)"
                             r"_(MIN|MAX))\Z")


def c_identifier(name: str) -> str:
    """``name`` as a C identifier: other characters become ``_``, a leading digit gets a ``_`` before it."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return f"_{text}" if not text or text[0].isdigit() else text


def check_symbol(symbol: str) -> None:
    """The C array's name (``--name``, also the files' stem) is a C identifier: letters, digits and ``_``, not
    starting with a digit, not a C keyword or a name of ``stddef.h`` / ``stdint.h``, and not one C reserves
    (``__`` or ``_`` and a capital first)."""
    allowed = "a C identifier (letters, digits, _; not starting with a digit)"
    if not _IDENTIFIER.match(symbol):
        raise BadOption("--name", symbol, allowed)
    if symbol in _C_KEYWORDS or _STANDARD_NAMES.match(symbol):
        raise BadOption("--name", symbol, f"{allowed} that is not a C keyword or standard name")
    if symbol.startswith("__") or re.match(r"_[A-Z]", symbol):
        raise BadOption("--name", symbol, f"{allowed} that C does not reserve (__ or _ and a capital first)")


def _c_string(text: str) -> str:
    safe = {ord(c) for c in " _.-:/"}  # UTF-8 bytes beyond these and ASCII letters and digits: octal escapes
    return '"' + "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or b in safe) else f"\\{b:03o}"
                         for b in text.encode()) + '"'


def _c_float(value: float) -> str:
    return f"{float(np.float32(value))!r}f"  # the float32 the kernels use, exactly


def _init(values: list[int]) -> str:
    """A C brace initializer (``{0}`` for none: C99 has no empty initializer)."""
    return "{" + (", ".join(str(v) for v in values) or "0") + "}"


def _io(plan: schema.ExecutionPlan, indices: list[int], described: list[dict], what: str, name: str) -> list[dict]:
    """Each I/O tensor of the plan, with its name and qparams from the report (same position, same shape)."""
    if len(described) != len(indices):
        raise BadFile(name, f"report.json lists {len(described)} model {what}(s), the .pte has {len(indices)}; "
                            "give the report.json compiled with this .pte (--report)")
    entries = []
    for position, (index, info) in enumerate(zip(indices, described, strict=True)):
        tensor = plan.values[index].val
        if not isinstance(tensor, schema.Tensor) or list(tensor.sizes) != list(info["shape"]):
            raise BadFile(name, f"report.json describes {what} {position} as shape {info['shape']}, the .pte "
                                "differs; give the report.json compiled with this .pte (--report)")
        entries.append({
            "name": info["name"], "sizes": list(tensor.sizes), "dim_order": list(tensor.dim_order),
            "dtype": str(TORCH_DTYPES[tensor.scalar_type]).removeprefix("torch."), "nbytes": tensor_nbytes(tensor),
            "scale": info.get("scale"), "zero_point": info.get("zero_point"),
        })
    return entries


def render(pte: bytes, io: dict, symbol: str = "model_pte", bundled: bytes | None = None) -> tuple[str, str]:
    """(header text, source text) for the program bytes ``pte`` with ``io`` (``report["io"]``). With
    ``bundled`` (``model.bpte``, the same program with test cases) the array holds the bundle instead, for a
    runner that checks its outputs with ExecuTorch's bundled-program API; the I/O and memory are the program's."""
    check_symbol(symbol)
    program = read_program(pte)
    plan = program.plan
    inputs = _io(plan, list(plan.inputs), io["inputs"], "input", program.name)
    outputs = _io(plan, list(plan.outputs), io["outputs"], "output", program.name)
    sizes = list(plan.non_const_buffer_sizes)
    macro = symbol.upper()
    guard = f"{macro}_H"
    rank = max([len(e["sizes"]) for e in inputs + outputs] + [1])
    array, what = (pte, "program") if bundled is None else (bundled, "bundled program")
    lines = [
        c_banner(symbol, "an ExecuTorch program as a C array, its model I/O and planned memory"),
        f"#ifndef {guard}", f"#define {guard}", "", "#include <stddef.h>", "#include <stdint.h>", "",
        f"#define {macro}_SIZE {len(array)}u  /* bytes of the {what} */",
        *([f"#define {macro}_IS_BUNDLED_PROGRAM 1  /* the array is a BundledProgram (.bpte) holding the program */"]
          if bundled is not None else []),
        f"#define {macro}_ALIGNMENT {ALIGNMENT}u",
        f"extern const uint8_t {symbol}[{macro}_SIZE];", "",
        "/* Planned memory: bytes per memory id (memory id 0 is reserved and always 0). MethodMeta's planned",
        "   buffer i is memory id i + 1: give the HierarchicalAllocator one buffer of each size. */",
        f"#define {macro}_NUM_PLANNED_BUFFERS {max(len(sizes) - 1, 0)}u",
    ]
    lines += [f"#define {macro}_MEMORY_ID{memory_id}_BYTES {size}u" for memory_id, size in enumerate(sizes)]
    lines += [f"#define {macro}_PLANNED_BYTES {sum(sizes)}u  /* all memory ids */", "",
              f"#define {macro}_MAX_RANK {rank}", "",
              "typedef struct {",
              "    const char *name;",
              "    const char *dtype;         /* \"int8\", \"float32\", ... */",
              "    uint32_t rank;",
              f"    int32_t sizes[{macro}_MAX_RANK];     /* logical (NCHW) shape */",
              f"    uint8_t dim_order[{macro}_MAX_RANK]; /* memory order of the dims, outermost first */",
              "    size_t nbytes;",
              "    int32_t has_qparams;       /* 0: no quantization parameters known */",
              "    float scale;               /* real = scale * (q - zero_point) */",
              "    int32_t zero_point;",
              f"}} {symbol}_io_t;", ""]
    source_tables = []
    named: set[str] = set()
    for what, entries in (("INPUT", inputs), ("OUTPUT", outputs)):
        lower = what.lower()
        lines.append(f"#define {macro}_NUM_{what}S {len(entries)}u")
        for position, e in enumerate(entries):
            prefix = f"{macro}_{what}{position}"
            by_name = f"{macro}_{what}_{c_identifier(e['name']).upper()}"
            if by_name not in named:  # two names may sanitize alike: the first keeps the macro
                named.add(by_name)
                lines.append(f"#define {by_name} {position}u")
            lines += [f"#define {prefix}_NAME {_c_string(e['name'])}",
                      f"#define {prefix}_DTYPE {_c_string(e['dtype'])}",
                      f"#define {prefix}_RANK {len(e['sizes'])}u",
                      f"#define {prefix}_SIZES {_init(e['sizes'])}",
                      f"#define {prefix}_DIM_ORDER {_init(e['dim_order'])}",
                      f"#define {prefix}_BYTES {e['nbytes']}u"]
            if e["scale"] is not None:
                lines += [f"#define {prefix}_SCALE {_c_float(e['scale'])}",
                          f"#define {prefix}_ZERO_POINT {int(e['zero_point'])}"]
        if entries:
            lines.append(f"extern const {symbol}_io_t {symbol}_{lower}s[{macro}_NUM_{what}S];")
            rows = [_io_row(e) for e in entries]
            source_tables += [f"const {symbol}_io_t {symbol}_{lower}s[{macro}_NUM_{what}S] = {{",
                              ",\n".join(rows), "};", ""]
        lines.append("")
    lines += [f"#endif /* {guard} */", ""]

    data = ",\n".join("    " + ", ".join(f"0x{b:02x}" for b in array[i:i + 16]) for i in range(0, len(array), 16))
    source = [
        c_banner(symbol, "the program bytes and I/O table"),
        f'#include "{symbol}.h"', "",
        "/* The program must start on a 16-byte boundary: ExecuTorch reads it in place. */",
        "#if defined(__GNUC__) || defined(__clang__)",
        f"#define {macro}_ALIGNED __attribute__((aligned({ALIGNMENT})))",
        "#elif defined(__ICCARM__)",
        f'#define {macro}_ALIGNED _Pragma("data_alignment={ALIGNMENT}")',
        "#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L",
        f"#define {macro}_ALIGNED _Alignas({ALIGNMENT})",
        "#else",
        f"#define {macro}_ALIGNED /* unknown compiler: align {symbol} to {ALIGNMENT} bytes in the linker script */",
        "#endif", "",
        f"{macro}_ALIGNED const uint8_t {symbol}[{macro}_SIZE] = {{", data, "};", "",
        *source_tables,
    ]
    return "\n".join(lines), "\n".join(source)


def _io_row(e: dict) -> str:
    has = e["scale"] is not None
    return (f"    {{{_c_string(e['name'])}, {_c_string(e['dtype'])}, {len(e['sizes'])}u, "
            f"{_init(e['sizes'])}, {_init(e['dim_order'])}, "
            f"{e['nbytes']}u, {int(has)}, {_c_float(e['scale']) if has else '0.0f'}, "
            f"{int(e['zero_point']) if has else 0}}}")


def write(folder: str | Path, pte: bytes, io: dict, symbol: str = "model_pte") -> list[Path]:
    """Write ``<symbol>.h`` and ``<symbol>.c`` into ``folder``; each appears whole, never through a link
    (``imxrt.writer``)."""
    header, source = render(pte, io, symbol)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{symbol}.h", folder / f"{symbol}.c"]
    writer.write_all({paths[0]: header.encode("ascii"), paths[1]: source.encode("ascii")})
    return paths
