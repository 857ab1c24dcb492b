"""The ``imxrt`` command: compile, run, report, header, targets. A user error prints one line, exit 1."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

from imxrt.errors import BadOption, ImxrtError

EXIT_USER_ERROR = 1
EXIT_INTERNAL_ERROR = 3


class _ErrorsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


_ERRORS_ONLY = _ErrorsOnly()  # one instance: main() may run many times in a process


def _quiet_third_party_logs() -> None:
    # torchao reports optional CUDA kernels it cannot load, torch and ExecuTorch their own deprecations, and
    # torch's symbolic shapes the user code it cannot find for a data-dependent value (before the error that
    # names the problem): noise for a CPU-only compiler's users, who cannot act on it.
    for name in ("torchao", "torch.utils._pytree", "executorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # a filter, not a level: importing torch resets the levels of its own loggers
    logging.getLogger("torch.fx.experimental.symbolic_shapes").addFilter(_ERRORS_ONLY)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def _path_unless_empty(text: str) -> Path | None:
    """``-o`` as a path; None for an empty one, which ``Path`` would read as the current folder (a script's
    unset variable, ``-o "$OUT"``, must not compile into wherever it runs)."""
    return Path(text) if text else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="imxrt", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    commands = parser.add_subparsers(dest="command", required=True)

    compile_ = commands.add_parser("compile", help="compile a PyTorch model to an int8 .pte")
    compile_.add_argument("source", help="a .py file defining model(), example_inputs() [, calibration_inputs(), "
                                         "evaluation_data()]"
                                         ", or package.module:function")
    compile_.add_argument("--target", default="imxrt700", help="target name (see `imxrt targets`)")
    compile_.add_argument("--isa", default=None,
                          help="CMSIS-NN path for the CPU ops: scalar|dsp|mve (default: the core's own; "
                               "only paths the core can run)")
    compile_.add_argument("-o", "--output", required=True, type=_path_unless_empty, help="output folder")
    compile_.add_argument("--calibration-samples", type=int, default=None,
                          help="use at most N calibration samples")
    compile_.add_argument("--neutron-compiler", default="auto", choices=("auto", "reference", "eiq"),
                          help="NPU compiler: eiq = NXP's eIQ Neutron SDK (device microcode), reference = the open "
                               "compiler (runs on the host only); auto (default): eiq when the SDK is installed")
    compile_.add_argument("--fetch-constants-to-sram", action="store_true",
                          help="eiq: microcode copies weights from flash to SRAM before use (models over SRAM)")
    compile_.add_argument("--dump-kernel-selection", action="store_true",
                          help="eiq: write the converter's kernel selection C code next to model.pte")
    compile_.add_argument("--neutron-profiling", action="store_true",
                          help="eiq: profiling microcode, and npu/partition_<i>.kernels.json mapping each Neutron "
                               "kernel to the model's ops")
    compile_.add_argument("--sram-budget", default=None, metavar="BYTES",
                          help="SRAM the program may use (e.g. 512K, 2M; default: the target's SRAM); "
                               "a plan over it is an error")
    compile_.add_argument("--io", default="float", choices=("float", "int8"),
                          help="model inputs and outputs: float (default; the program quantizes them) or int8 "
                               "(the program takes and returns the int8 tensors, no float I/O in the arena)")
    compile_.add_argument("--activation-ranges", default="minmax", choices=("minmax", "mse"),
                          help="how calibration sets each activation's int8 range: minmax (default; the widest "
                               "values seen) or mse (the range of least int8 rounding-plus-clipping error over a "
                               "histogram of the values seen: narrower where rare values stretch it)")
    compile_.add_argument("--bias-correction", action="store_true",
                          help="after calibration, each conv / linear bias takes back the mean shift its int8 "
                               "weight rounding causes on the calibration data")
    compile_.add_argument("--equalize", action="store_true",
                          help="before calibration, scale each convolution's output channels to even out their "
                               "int8 activation ranges, the conv / linear layers reading them taking the inverse "
                               "(cross-layer equalization; one more float pass over the calibration data)")
    compile_.add_argument("--float-layer", action="append", default=[], metavar="NAME",
                          help="keep the module NAME (its path in the model, e.g. encoder.0) in float, on the "
                               "Cortex-M: a layer whose values need more range than int8 (repeatable)")
    compile_.add_argument("--cell-state", default="float", choices=("float", "int8"),
                          help="an LSTM's cell state: float (default; its update and tanh in float on the CPU "
                               "between the int8 gates, a few more kernel calls per step) or int8 (one scale "
                               "across its steps: an all-int8 step, less accurate)")
    compile_.add_argument("--c-header", action="store_true",
                          help="also write model_pte.h/.c: the program as a C array with its I/O and arena sizes")
    compile_.add_argument("--bundle", type=int, default=None, metavar="N",
                          help="also write model.bpte: ExecuTorch's BundledProgram with N test inputs (calibration "
                               "samples, else random over each input's range) and the outputs the board must give")
    compile_.add_argument("--workers", type=int, default=1, metavar="N",
                          help="accuracy report (a source with evaluation_data()): run the program in N processes "
                               "(default: 1; each takes seconds to start, so more pay off over long evaluations)")
    compile_.add_argument("--quiet", action="store_true", help="no progress bar or summary")

    run = commands.add_parser("run", help="run a compiled .pte on this computer, bit-exactly (a .bpte: run its "
                                          "test cases and check their outputs)")
    run.add_argument("pte", type=Path, help="the program (e.g. out/model.pte), or a bundle (out/model.bpte)")
    run.add_argument("--input", action="append", default=[], type=Path, metavar="NPY",
                     help="a .npy file per program input, in order (repeat the flag); one numeric array each "
                          "(big-endian is converted; .npz archives are refused: save each array with numpy.save)")
    run.add_argument("--quantize-inputs", action="store_true",
                     help="int8-input program: quantize float .npy inputs with each input's scale and zero point "
                          "from report.json (out-of-range values saturate, with a warning)")
    run.add_argument("--output-dir", type=Path, default=None, help="write output_<i>.npy here")
    run.add_argument("--check-plan", action="store_true",
                     help="poison each planned tensor's bytes when its lifetime ends (catches bad memory plans)")
    run.add_argument("--etdump", type=Path, default=None, metavar="PATH",
                     help="write an ETDump of this run with the cost model's estimated time per op and NPU kernel, "
                          "for ExecuTorch's Inspector with model.etrecord")
    run.add_argument("--report", type=Path, default=None, metavar="JSON",
                     help="the report.json compiled with the .pte, for --etdump and --quantize-inputs "
                          "(default: beside the .pte)")

    report = commands.add_parser("report", help="write OUTDIR/report.html from OUTDIR/report.json")
    report.add_argument("outdir", type=Path, help="a folder imxrt compile wrote (e.g. out/)")

    header = commands.add_parser("header", help="write a .pte as C source: NAME.h/NAME.c with its I/O and arena "
                                                "sizes")
    header.add_argument("pte", type=Path, help="the program (e.g. out/model.pte)")
    header.add_argument("-o", "--output", type=Path, default=None, help="folder (default: beside the .pte)")
    header.add_argument("--name", default="model_pte", help="C symbol and file name (default: model_pte)")
    header.add_argument("--report", type=Path, default=None, metavar="JSON",
                        help="the report.json compiled with the .pte (default: beside the .pte)")

    bundle = commands.add_parser("bundle", help="write OUTDIR/model.bpte: the program with test inputs and the "
                                                "outputs it must give (ExecuTorch's BundledProgram)")
    bundle.add_argument("outdir", type=Path, help="a folder imxrt compile wrote (e.g. out/)")
    bundle.add_argument("--samples", type=int, default=4, metavar="N",
                        help="test inputs: seeded random values over each input's range (default: 4)")

    explore = commands.add_parser("explore", help="open OUTDIR in Model Explorer (model.etrecord with the estimated "
                                                  "time and module of each op, and model.pte); needs [explorer]")
    explore.add_argument("outdir", type=Path, help="a folder imxrt compile wrote (e.g. out/)")
    explore.add_argument("--etdump", type=Path, default=None, metavar="PATH",
                         help="also overlay this ETDump (imxrt run --etdump) through ExecuTorch's ETDump provider")
    explore.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 (default: 8080, or the next free "
                                                                 "one up to 8099)")
    explore.add_argument("--no-browser", action="store_true", help="print the address instead of opening a browser")

    commands.add_parser("targets", help="list the targets")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _quiet_third_party_logs()
    logging.basicConfig(format="imxrt: %(levelname)s: %(message)s", level=logging.WARNING, stream=sys.stderr)
    try:
        if args.command == "targets":
            return _targets()
        if args.command == "run":
            return _run(args)
        if args.command == "report":
            return _report(args)
        if args.command == "header":
            return _header(args)
        if args.command == "bundle":
            return _bundle(args)
        if args.command == "explore":
            return _explore(args)
        return _compile(args)
    except ImxrtError as e:
        print(f"imxrt: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("imxrt: interrupted", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as e:  # our bug: say so in one line unless asked for the traceback
        if args.debug or os.environ.get("IMXRT_DEBUG"):
            raise
        print(f"imxrt: internal error: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
              " (rerun with --debug for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


def _targets() -> int:
    from imxrt.targets import TARGETS

    for target in TARGETS.values():
        npu = target.npu
        npu_text = (f"Neutron {npu.hw_version}-{npu.macs_per_cycle} ({npu.num_pipes} pipes x {npu.num_macs} MACs) "
                    f"@ {npu.clock_hz / 1e6:.0f} MHz") if npu else "no NPU"
        isas = "|".join(isa.value for isa in target.cpu.core.allowed)
        sram = f"{target.sram_bytes // 1024} KiB" if target.sram_bytes is not None else "depends on the part"
        print(f"{target.name:14s} {target.description}")
        print(f"{'':14s} NPU: {npu_text}; CPU: {target.cpu.core.name} ({target.cpu.isa.value}; --isa {isas}) @ "
              f"{target.cpu.clock_hz / 1e6:.0f} MHz; SRAM {sram}")
    return 0


def _compile(args: argparse.Namespace) -> int:
    from imxrt.memory.report import summary_lines as memory_lines
    from imxrt.npu.compilers.eiq import NeutronConverterFailed
    from imxrt.output_folder import check_writable
    from imxrt.pipeline import CompileOptions, compile, keep_failed_partition
    from imxrt.report.advice import advice_lines
    from imxrt.report.logit_steps import warning_lines
    from imxrt.report.placement import summary_lines
    from imxrt.source import load_source
    from imxrt.targets import get_target

    target = get_target(args.target, args.isa)  # before any slow work: a typo fails at once
    if args.calibration_samples is not None and args.calibration_samples < 1:
        raise BadOption("--calibration-samples", args.calibration_samples, "a positive number")
    if args.bundle is not None and args.bundle < 1:
        raise BadOption("--bundle", args.bundle, "a positive number of test inputs")
    if args.workers < 1:
        raise BadOption("--workers", args.workers, "a positive number of processes")
    if args.output is None:
        raise BadOption("-o/--output", "", "a folder (e.g. out; . for the current folder)")
    check_writable(args.output)  # a folder we must not or cannot write fails before minutes of compiling
    source = load_source(args.source)
    options = CompileOptions(
        neutron_compiler=args.neutron_compiler,
        fetch_constants_to_sram=args.fetch_constants_to_sram,
        dump_kernel_selection=args.dump_kernel_selection,
        neutron_profiling=args.neutron_profiling,
        calibration_samples=args.calibration_samples,
        show_progress=not args.quiet,
        sram_budget=parse_bytes("--sram-budget", args.sram_budget),
        io=args.io,
        cell_state=args.cell_state,
        activation_ranges=args.activation_ranges,
        bias_correction=args.bias_correction,
        equalization=args.equalize,
        float_layers=tuple(args.float_layer),
    )
    calibration, kept = source.calibration, [source.example_inputs]
    if args.bundle is not None and calibration is not None:  # the first samples, kept for the bundle's inputs
        import itertools

        from imxrt.model_checks import read_samples

        reader = read_samples(calibration, "calibration")
        kept = [sample for _, sample in itertools.islice(reader, args.bundle)]
        calibration = itertools.chain(kept, (sample for _, sample in reader))
    try:
        result = compile(source.model, source.example_inputs, target, calibration, options)
    except NeutronConverterFailed as e:  # keep the converter's input for a bug report
        kept = keep_failed_partition(e, args.output)
        raise NeutronConverterFailed(e.partition, f"{e.problem} (its .tflite is kept at {kept})", e.tflite) from e
    accuracy = []
    if source.evaluation is not None:  # the int8 program against the float model on the user's labels
        from imxrt.accuracy import evaluate
        from imxrt.runtime import load

        report = evaluate(source.model, load(result.pte), source.evaluation, source.example_inputs,
                          quantized=result.quantized, workers=args.workers, show_progress=not args.quiet)
        result.report["accuracy"] = report.as_dict()
        result.report["advice"] = report.advice + result.report["advice"]  # what the evaluation found first
        accuracy = report.lines()
    bundled = None
    if args.bundle is not None:
        from imxrt import bundle

        # the samples the program was calibrated on (the example inputs when the source gives none)
        inputs = bundle.test_inputs(result.io, args.bundle, kept)
        bundled = bundle.bundle(result.pte, result.io, inputs)
    result.save(args.output, c_header=args.c_header, bundled=bundled)
    if not args.quiet:
        for line in (summary_lines(result.report) + warning_lines(result.report) + memory_lines(result.report["memory"])
                     + accuracy + advice_lines(result.report["advice"])):
            print(line)
        dumps = f", {', '.join(sorted(result.npu_files))}" if result.npu_files else ""
        header = ", model_pte.h, model_pte.c" if args.c_header else ""
        bpte = f", model.bpte ({args.bundle} test cases)" if bundled else ""
        print(f"wrote {args.output / 'model.pte'} ({len(result.pte):,} bytes), report.json, report.html{header}{bpte}, "
              f"{len(result.partitions)} partition .tflite{dumps}")
    return 0


_BYTE_SUFFIXES = {"": 1, "K": 1024, "M": 1024 * 1024}


def parse_bytes(option: str, text: str | None) -> int | None:
    """``"512K"`` -> 524288: a byte count with an optional K (KiB) or M (MiB) suffix."""
    if text is None:
        return None
    number, suffix = text.strip()[:-1], text.strip()[-1:].upper()
    if suffix.isdigit():
        number, suffix = text.strip(), ""
    if suffix not in _BYTE_SUFFIXES or not number.isdigit() or int(number) < 1:
        raise BadOption(option, text, "a positive byte count, optionally with K or M (e.g. 512K, 2M)")
    return int(number) * _BYTE_SUFFIXES[suffix]


def read_report(path: Path, missing: str) -> dict:
    """A report.json as a dict; ``missing`` says what to do when there is no such file."""
    import json

    from imxrt.errors import BadFile
    from imxrt.files import JSON_LIMIT, read_text

    try:
        return json.loads(read_text(path, JSON_LIMIT, "a report.json", missing))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nesting deeper than Python's stack
        raise BadFile(str(path), f"is not readable JSON ({str(e).strip().splitlines()[0]}); "
                                 "recompile with imxrt compile") from None


# What each entry of report.json's io gives (passes/int8_io.py io_metadata): the fields imxrt run, header and
# bundle read, with the JSON types they must have; scale and zero_point are null for a tensor nothing quantizes.
_IO_FIELDS = {"name": ((str,), "a string"), "shape": ((list,), "a list"), "dtype": ((str,), "a string"),
              "dim_order": ((list,), "a list"), "scale": ((int, float, type(None)), "a number or null"),
              "zero_point": ((int, type(None)), "an integer or null")}


def read_io(path: Path) -> dict:
    """``report["io"]`` of a report.json (the model inputs' and outputs' names, shapes, scales), each entry
    checked to hold the fields ``_IO_FIELDS`` lists."""
    from imxrt.errors import BadFile

    report = read_report(path, "give the report.json compiled with the .pte (--report)")
    io = report.get("io") if isinstance(report, dict) else None
    if not isinstance(io, dict) or not isinstance(io.get("inputs"), list) or not isinstance(io.get("outputs"), list):
        raise BadFile(str(path), "has no model I/O description (io); recompile with this imxrt")
    for group in ("inputs", "outputs"):
        for position, entry in enumerate(io[group]):
            where = f"io.{group}[{position}]"
            if not isinstance(entry, dict):
                raise BadFile(str(path), f"{where} is not an object; recompile with this imxrt")
            for key, (kinds, kind) in _IO_FIELDS.items():
                if key not in entry:
                    raise BadFile(str(path), f"{where} has no {key}; recompile with this imxrt")
                if not isinstance(entry[key], kinds) or isinstance(entry[key], bool):
                    raise BadFile(str(path), f"{where}.{key} is {entry[key]!r}, not {kind}; recompile with this imxrt")
            if entry["scale"] is not None and entry["zero_point"] is None:
                raise BadFile(str(path), f"{where} has a scale but no zero_point; recompile with this imxrt")
    return io


def paired_report(pte: Path, report: Path | None) -> Path:
    """The report.json compiled with ``pte``: ``report`` (--report) as given, else the one beside the .pte, which
    must be the one its folder's manifest pairs with it (a .pte copied in, or a compile replacing the folder's
    files, would pair two compiles' files)."""
    from imxrt.output_folder import check_pair

    if report is not None:
        return report
    check_pair(pte, pte.parent / "report.json")
    return pte.parent / "report.json"


def _header(args: argparse.Namespace) -> int:
    from imxrt import c_array, output_folder
    from imxrt.files import read_regular
    from imxrt.pte.reader import HOST_MEMORY_CAP, PROGRAM_FILE

    c_array.check_symbol(args.name)  # before reading anything
    pte = read_regular(args.pte, HOST_MEMORY_CAP, PROGRAM_FILE)
    io = read_io(paired_report(args.pte, args.report))
    folder = args.output or args.pte.parent
    names = [f"{args.name}.h", f"{args.name}.c"]
    output_folder.check_overwrite(folder, names)  # a compile's folder: never over a file of the user's
    paths = c_array.write(folder, pte, io, args.name)
    output_folder.adopt(folder, names)  # the next compile there replaces or removes them
    print(f"wrote {paths[0]} and {paths[1]} ({len(pte):,} program bytes)")
    return 0


def _report(args: argparse.Namespace) -> int:
    from imxrt import writer
    from imxrt.errors import BadFile
    from imxrt.report.html import render

    path = args.outdir / "report.json"
    report = read_report(path, "give the folder imxrt compile -o wrote")
    missing = [key for key in ("target", "neutron_compiler", "ops", "partitions", "summary")
               if not isinstance(report, dict) or key not in report]
    if missing:
        raise BadFile(str(path), f"is not an imxrt report (no {', '.join(missing)}); recompile with imxrt compile")
    try:
        page = render(report)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise BadFile(str(path), f"does not have the layout this imxrt writes ({type(e).__name__}: {e}); "
                                 "recompile with imxrt compile") from None
    writer.write_whole(args.outdir / "report.html", page.encode("utf-8"))  # the old one stays on an interrupt
    print(f"wrote {args.outdir / 'report.html'}")
    return 0


def _run_bundle(args: argparse.Namespace, data: bytes) -> int:
    """Run a ``.bpte``'s test cases (``data``, the file's bytes) on the host runtime; exit 1 when an output
    differs from the bundle's."""
    from imxrt import bundle
    from imxrt.errors import BadFile
    from imxrt.runtime import load

    if args.input or args.output_dir or args.etdump or args.quantize_inputs:
        raise BadOption("--input/--output-dir/--etdump/--quantize-inputs", str(args.pte),
                        "nothing: a .bpte carries its own inputs (run its model.pte for those options)")
    name = str(args.pte)
    checked, cases = bundle.read(data, name)
    program = load(checked, check_plan=args.check_plan)
    checks = bundle.verify(program, cases)
    for check in checks:
        print(f"output {check.output}: largest difference {check.worst:g} over {len(cases)} test case(s)")
    failed = [check for check in checks if check.worst != 0]
    if failed:
        worst = max(failed, key=lambda c: c.worst)
        raise BadFile(name, f"output {worst.output} differs from the bundle's expected output by {worst.worst:g} "
                            f"(test case {worst.case}): this runtime and the program's compiler disagree")
    print(f"all {len(cases)} test case(s) give the bundled outputs exactly")
    return 0


def _bundle(args: argparse.Namespace) -> int:
    from imxrt import bundle, output_folder, writer
    from imxrt.files import read_regular
    from imxrt.pte.reader import HOST_MEMORY_CAP, PROGRAM_FILE

    if args.samples < 1:
        raise BadOption("--samples", args.samples, "a positive number of test inputs")
    pte_path = args.outdir / "model.pte"
    pte = read_regular(pte_path, HOST_MEMORY_CAP, PROGRAM_FILE, "give the folder imxrt compile -o wrote")
    io = read_io(paired_report(pte_path, None))
    output_folder.check_overwrite(args.outdir, ["model.bpte"])  # never over a file of the user's
    data = bundle.bundle(pte, io, bundle.test_inputs(io, args.samples))
    writer.write_whole(args.outdir / "model.bpte", data)
    output_folder.adopt(args.outdir, ["model.bpte"])  # the next compile there replaces or removes it
    print(f"wrote {args.outdir / 'model.bpte'} ({len(data):,} bytes, {args.samples} test cases)")
    return 0


def _explore(args: argparse.Namespace) -> int:
    from imxrt import explorer

    report = read_report(args.outdir / "report.json", "give the folder imxrt compile -o wrote")
    cfg = explorer.config(args.outdir, report, args.etdump)
    print(f"Model Explorer on http://{explorer.HOST}:{args.port}/ (Ctrl-C stops it): {args.outdir / 'model.etrecord'} "
          f"with the overlays '{explorer.ESTIMATE}' and '{explorer.MODULE}', and {args.outdir / 'model.pte'}")
    explorer.serve(cfg, args.port, open_browser=not args.no_browser)
    return 0


def check_output_dir(path: Path) -> None:
    """Refuse an ``--output-dir`` that is a file, or is in one, or cannot be written, before the program runs:
    a run's outputs must not be lost at its end. Nothing is created."""
    import tempfile

    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise BadOption("--output-dir", str(path), f"a folder ({existing} is a file)")
    try:  # os.access answers for the user's permissions only; a write also finds read-only mounts
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise BadOption("--output-dir", str(path), f"a folder that can be written ({existing} cannot be written: "
                                                   f"{e.strerror or e})") from None


def _npy(array) -> bytes:
    """``array`` as the bytes ``np.save`` writes."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _run(args: argparse.Namespace) -> int:
    import zlib

    import numpy as np

    from imxrt import integrity, writer
    from imxrt.bundle import is_bundle
    from imxrt.errors import BadFile
    from imxrt.files import read_regular
    from imxrt.pte.reader import HOST_MEMORY_CAP
    from imxrt.runtime import load
    from imxrt.runtime.inputs import read_npy

    data = read_regular(args.pte, HOST_MEMORY_CAP, "a .pte program or .bpte bundle (e.g. out/model.pte)")
    if is_bundle(data):
        return _run_bundle(args, data)
    if args.output_dir is not None:
        check_output_dir(args.output_dir)
    inputs = [read_npy(path) for path in args.input]
    report = paired_report(args.pte, args.report) if args.quantize_inputs or args.etdump is not None else None
    if args.quantize_inputs:
        from imxrt.runtime.inputs import quantize_inputs

        inputs = quantize_inputs(inputs, read_io(report)["inputs"])
    program = load(data, check_plan=args.check_plan, name=str(args.pte))
    outputs = program.forward(*inputs)
    if args.etdump is not None:
        from imxrt.profiling.etdump import write_etdump

        write_etdump(args.etdump, program.file, report)
    if args.output_dir is not None:  # each whole, all or none (a full disk), never through a link at the name
        try:
            args.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # e.g. made a file since the check
            raise BadFile(str(args.output_dir), f"cannot be written ({e.strerror or e})") from None
        writer.write_all({args.output_dir / f"output_{index}.npy": _npy(output)
                          for index, output in enumerate(outputs)})
    for index, output in enumerate(outputs):
        crc = zlib.crc32(np.ascontiguousarray(output).tobytes())
        print(f"output {index}: shape {tuple(output.shape)} {output.dtype} crc32 {crc:08x}")
    if args.output_dir is not None:
        print(f"wrote {len(outputs)} output(s) to {args.output_dir}")
    if args.etdump is not None:
        print(f"wrote {args.etdump} (estimated times from the cost model, not measurements)")
    unchecked = integrity.note(program.name, program.file.seal)
    if unchecked:  # last: a user error stays the one line on stderr
        print(unchecked, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
