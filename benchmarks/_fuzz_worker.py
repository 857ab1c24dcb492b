"""One fuzzing worker: loads and runs ``.pte`` files on the host runtime, one request per line, until stdin ends.

Started by ``_fuzz_harness.WorkerPool`` as ``python _fuzz_worker.py CAP_BYTES``. Each request is a JSON line
``{"file": path, "inputs": path.npz}``; each reply one JSON line on the protocol pipe (the process's original
stdout; anything the runtime prints goes to stderr instead):

- ``{"result": "ran", "digest": sha256 of the outputs, "seal": "Sealed" | "Unsealed"}``
- ``{"result": "error", "type": ..., "message": ...}``: an ``ImxrtError``
- ``{"result": "memory", ...}``: a ``MemoryError`` or an allocator refusal (the address-space cap was hit)
- ``{"result": "internal", "type": ..., "message": ..., "where": innermost frame in imxrt}``: anything else

A request ``{"probe": "crash" | "hang" | "allocate"}`` makes the worker fail on purpose, so the
harness's test can see each failure detected.

The address-space cap is set once, before torch is imported, so the whole worker lives under it; the parent
enforces the per-trial timeout and restarts a worker that hangs or dies.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import sys
import time
import traceback
import warnings

# A torch or numpy allocation the cap refuses raises one of these instead of MemoryError.
_ALLOCATOR_REFUSALS = ("can't allocate memory", "not enough memory", "Cannot allocate memory", "bad_alloc",
                       "out of memory")


def _digest(outputs) -> str:
    """Outputs are equal when their dtypes, shapes and bytes are: the runtime promises bit-exactness."""
    import numpy as np

    digest = hashlib.sha256()
    for output in outputs:
        array = np.ascontiguousarray(output)
        digest.update(f"{array.dtype.str}{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _where(error: BaseException) -> str:
    """Where the error was raised and, for a wrapped one, where its first cause was: the innermost frame of
    each traceback inside the imxrt package (file:line), else the innermost frame."""
    places = []
    seen = set()
    while error is not None and id(error) not in seen:  # a cause chain can loop
        seen.add(id(error))
        frames = traceback.extract_tb(error.__traceback__)
        ours = [f for f in frames if f"{os.sep}imxrt{os.sep}" in f.filename] or frames
        if ours:
            places.append(f"{os.path.basename(ours[-1].filename)}:{ours[-1].lineno}")
        error = error.__cause__ or error.__context__
    return places[0] if len(places) < 2 else f"{places[0]}, from {places[-1]}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _probe(kind: str, cap: int) -> None:
    """What the harness's own test makes a worker do, to see each defect class detected."""
    if kind == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif kind == "hang":
        time.sleep(3600)
    elif kind == "allocate":
        bytearray(cap)


def run_one(request: dict, load, imxrt_error: type, inputs_cache: dict, cap: int) -> dict:
    import numpy as np

    if "probe" in request:
        try:
            _probe(request["probe"], cap)
        except MemoryError as e:
            return {"result": "memory", "type": type(e).__name__, "message": _first_line(e), "where": _where(e)}
        return {"result": "ran", "digest": "", "seal": ""}
    if request["inputs"] not in inputs_cache:
        with np.load(request["inputs"]) as saved:
            inputs_cache[request["inputs"]] = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    inputs = inputs_cache[request["inputs"]]
    with open(request["file"], "rb") as file:
        data = file.read()
    try:
        program = load(data)
        outputs = program.forward(*inputs)
    except imxrt_error as e:
        return {"result": "error", "type": type(e).__name__, "message": str(e)}
    except MemoryError as e:
        return {"result": "memory", "type": type(e).__name__, "message": _first_line(e), "where": _where(e)}
    except Exception as e:  # every other exception is what the fuzzer looks for
        chain = f"{e} {e.__cause__ or ''}"
        result = "memory" if any(words in chain for words in _ALLOCATOR_REFUSALS) else "internal"
        return {"result": result, "type": type(e).__name__, "message": _first_line(e), "where": _where(e)}
    return {"result": "ran", "digest": _digest(outputs), "seal": type(program.file.seal).__name__}


def main() -> None:
    cap = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # prints from the runtime must not corrupt the protocol
    warnings.filterwarnings("ignore")
    import logging

    for name in ("torchao", "torch.utils._pytree", "executorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import imxrt.runtime
    from imxrt.errors import ImxrtError

    inputs_cache: dict = {}
    protocol.write('{"result": "ready"}\n')
    protocol.flush()
    for line in sys.stdin:
        reply = run_one(json.loads(line), imxrt.runtime.load, ImxrtError, inputs_cache, cap)
        protocol.write(json.dumps(reply) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
