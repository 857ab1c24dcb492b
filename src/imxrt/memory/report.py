"""Memory stage, the report: what the program needs of SRAM and flash (``report.json``'s ``memory``).

SRAM = the planned arenas (activations, program inputs and outputs, CMSIS-NN scratch: one per memory id)
+ the runtime's temp allocator (the stock ``NeutronBackend`` takes each call's NPU scratch, profile and
debug buffers, pointer tables and any layout copy from it, and the runtime resets it after every
instruction: the program needs the largest call's, not the sum, see ``delegate_temp_bytes``)
+ the runtime's method allocator (an estimate, see ``method_allocator_bytes``).
Flash = the whole ``.pte`` (constant tensors, delegate payloads, the program itself).

Every figure comes from the serialized ``.pte`` and the plans the planner recorded while writing it.
"""

from __future__ import annotations

from collections.abc import Sequence

from executorch.exir import schema

from imxrt.memory.lifetimes import Buffer
from imxrt.memory.planning_pass import MemoryPlan
from imxrt.npu import microcode_payload, reference_payload
from imxrt.pte.reader import ProgramFile, read_program, tensor_nbytes
from imxrt.targets import Target

PEAK_TENSORS = 5  # the largest live tensors at the peak named in the report

# Bytes of the runtime's objects on a 32-bit Cortex-M (ExecuTorch 1.5 headers: EValue holds an int64
# payload and a tag; TensorImpl four pointers, dim, numel, numel bound, dtype, dynamism, device).
EVALUE_BYTES = 16
TENSOR_IMPL_BYTES = 32
POINTER_BYTES = 4
SPAN_BYTES = 8  # a pointer and a length
CHAIN_BYTES = 16
BACKEND_DELEGATE_BYTES = 32
ALLOCATION_ALIGNMENT = 8
NPU_BUFFER_ALIGNMENT = 16  # NeutronBackend's BUFFER_ALIGNMENT


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALLOCATION_ALIGNMENT) * ALLOCATION_ALIGNMENT


def method_allocator_bytes(program: ProgramFile) -> int:
    """An estimate of what ExecuTorch's ``Method::init`` takes from the method allocator for this plan:
    the EValue table; per tensor value its TensorImpl and strides (sizes and dim order are read in place
    from the flatbuffer); per tensor list its pointer and tensor arrays; per chain the kernel pointer and
    argument-span tables, per instruction its argument pointer list; per delegate its handle. Not counted:
    what a delegate's own init allocates, and the temp allocator (no kernel here asks for one: CMSIS-NN
    scratch is planned)."""
    plan = program.plan
    total = _aligned(EVALUE_BYTES * len(plan.values))
    for value in plan.values:
        if isinstance(value.val, schema.Tensor):
            total += _aligned(TENSOR_IMPL_BYTES) + _aligned(POINTER_BYTES * len(value.val.sizes))
        elif isinstance(value.val, (schema.TensorList, schema.OptionalTensorList)):
            total += _aligned(POINTER_BYTES * len(value.val.items)) + _aligned(POINTER_BYTES * len(value.val.items))
    for chain in plan.chains:
        count = len(chain.instructions)
        total += _aligned(CHAIN_BYTES) + _aligned(POINTER_BYTES * count) + _aligned(SPAN_BYTES * count)
        for instruction in chain.instructions:
            call = instruction.instr_args
            if isinstance(call, (schema.KernelCall, schema.DelegateCall)):
                total += _aligned(POINTER_BYTES * len(call.args))
    total += _aligned(BACKEND_DELEGATE_BYTES * len(plan.delegates))
    return total


def npu_scratch_bytes(program: ProgramFile) -> list[int]:
    """Each NPU partition's scratch, as its Neutron compiler planned it (in delegate order): the reference
    payload's metadata, or the microcode header's scratch, profile and debug buffers (the runtime allocates
    all three per inference)."""
    result = []
    for delegate in program.plan.delegates:
        blob = program.delegate_data[delegate.processed.index]
        if reference_payload.is_reference(blob):
            result.append(int(reference_payload.unpack(blob).metadata.get("scratch_bytes", 0)))
        elif microcode_payload.is_microcode_payload(blob):
            header = microcode_payload.parse(blob).header
            result.append(header.scratch_bytes + header.profile_bytes + header.debug_bytes)
        else:
            result.append(0)
    return result


def delegate_temp_bytes(program: ProgramFile) -> list[int]:
    """What each delegate call takes from the temp allocator, in execution order, allocation by allocation
    as the stock ``NeutronBackend::execute`` makes them on a 32-bit core: the input and output pointer
    tables (three extra output slots), the scratch, profile and debug buffers (16-byte aligned), and a
    16-byte aligned copy of every tensor it must transpose (format flag 1, contiguous dim order, more than
    one channel)."""
    plan = program.plan
    result = []
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if not isinstance(call, schema.DelegateCall):
                continue
            blob = program.delegate_data[plan.delegates[call.delegate_index].processed.index]
            ios = _delegate_io(blob, len(call.args))
            if ios is None:
                result.append(0)
                continue
            buffers, flagged = ios
            at = 0

            def take(nbytes: int, alignment: int = POINTER_BYTES) -> None:
                nonlocal at
                at = -(-at // alignment) * alignment + nbytes

            n_in = sum(kind == "in" for kind, _ in flagged)
            take(POINTER_BYTES * n_in)
            take(POINTER_BYTES * (len(flagged) - n_in + 3))
            for nbytes in buffers:
                take(nbytes, NPU_BUFFER_ALIGNMENT)
            for _, arg in flagged:
                value = plan.values[call.args[arg]].val if arg is not None else None
                if isinstance(value, schema.Tensor) and _transposed_by_runtime(value):
                    take(tensor_nbytes(value), NPU_BUFFER_ALIGNMENT)
            result.append(at)
    return result


def _delegate_io(blob: bytes, n_args: int) -> tuple[list[int], list[tuple[str, int | None]]] | None:
    """A payload's per-call buffers (scratch, profile, debug) and, inputs then outputs, each tensor's
    position among the call's arguments where its format flag asks for NHWC (``None`` where it does not)."""
    if reference_payload.is_reference(blob):
        meta = reference_payload.unpack(blob).metadata
        first_output = n_args - len(meta["outputs"])
        flagged = [("in", e["arg"] if e["format_flag"] else None) for e in meta["inputs"]]
        flagged += [("out", first_output + e["arg"] if e["format_flag"] else None) for e in meta["outputs"]]
        return [int(meta.get("scratch_bytes", 0)), 0, 0], flagged
    if microcode_payload.is_microcode_payload(blob):
        parsed = microcode_payload.parse(blob)
        header = parsed.header
        flagged = [("in", arg if flag else None)
                   for flag, arg in zip(parsed.input_flags, parsed.input_map, strict=True)]
        flagged += [("out", parsed.n_args + arg if flag else None)
                    for flag, arg in zip(parsed.output_flags, parsed.output_map, strict=True)]
        return [header.scratch_bytes, header.profile_bytes, header.debug_bytes], flagged
    return None


def _transposed_by_runtime(tensor: schema.Tensor) -> bool:
    rank = len(tensor.sizes)
    contiguous = list(tensor.dim_order) == list(range(rank))
    return rank >= 3 and tensor.sizes[rank - 3] != 1 and contiguous


def _memory_entry(plan: MemoryPlan) -> dict:
    by_index = {b.index: b for b in plan.buffers}
    bound = plan.bound.nbytes
    return {
        "memory_id": plan.memory_id,
        "arena_bytes": plan.arena_bytes,
        "lower_bound_bytes": bound,
        "ratio_to_bound": round(plan.arena_bytes / bound, 4) if bound else 1.0,
        "algorithm": plan.chosen.label,
        "executorch_default_bytes": plan.executorch_bytes,
        "candidates": [{"algorithm": label, "bytes": size} for label, size in plan.tried],
        "tensors": len(plan.buffers),
        "peak_step": plan.bound.step,
        "peak_tensors": [{"name": by_index[i].name, "bytes": by_index[i].nbytes, "role": by_index[i].role}
                         for i in plan.bound.live[:PEAK_TENSORS]],
        "buffers": [_buffer_entry(b, plan.chosen.offsets[b.index], by_index) for b in plan.buffers],
    }


def _buffer_entry(b: Buffer, offset: int, by_index: dict[int, Buffer]) -> dict:
    """One planned tensor for the memory timeline: its bytes at ``offset`` from step ``first`` to ``last``
    (inclusive); a tensor living inside another's storage names it (``view_of``)."""
    return {"name": b.name, "role": b.role, "dtype": b.dtype, "bytes": b.nbytes, "offset": offset,
            "first": b.first, "last": b.last, "view_of": by_index[b.base].name if b.base is not None else None}


def memory_report(plans: Sequence[MemoryPlan], pte: bytes, target: Target, sram_budget: int | None) -> dict:
    """The ``memory`` section of ``report.json``. ``sram_budget`` (bytes) overrides the target's SRAM."""
    program = read_program(pte)
    arenas = [_memory_entry(plan) for plan in sorted(plans, key=lambda p: p.memory_id)]
    npu = npu_scratch_bytes(program)
    temp = delegate_temp_bytes(program)
    runtime = method_allocator_bytes(program)
    arena_total = sum(entry["arena_bytes"] for entry in arenas)
    budget = sram_budget if sram_budget is not None else target.sram_bytes
    constants = sum(len(data) for data in program.constants)
    delegates = sum(len(data) for data in program.delegate_data)
    total = arena_total + max(temp, default=0) + runtime
    return {
        "arenas": arenas,
        "npu_scratch_bytes": npu,
        "delegate_temp_bytes": temp,
        "method_allocator_bytes": runtime,
        "sram": {
            "arena_bytes": arena_total,
            "temp_allocator_bytes": max(temp, default=0),
            "method_allocator_bytes": runtime,
            "total_bytes": total,
            "budget_bytes": budget,
            "budget_from": "--sram-budget" if sram_budget is not None else ("target" if budget is not None else None),
            "fits": None if budget is None else total <= budget,
        },
        "flash": {
            "pte_bytes": len(pte),
            "constant_bytes": constants,
            "delegate_bytes": delegates,
            "budget_bytes": target.flash_bytes,
            "fits": None if target.flash_bytes is None else len(pte) <= target.flash_bytes,
        },
    }


def summary_lines(memory: dict) -> list[str]:
    """The CLI's memory lines: the same numbers as the JSON."""
    sram = memory["sram"]
    lines = []
    for arena in memory["arenas"]:
        lines.append(f"memory id {arena['memory_id']}: arena {arena['arena_bytes']:,} B ({arena['algorithm']}), "
                     f"lower bound {arena['lower_bound_bytes']:,} B (x{arena['ratio_to_bound']:.3f}); "
                     f"ExecuTorch's default plan {arena['executorch_default_bytes']:,} B")
    budget = f" of {sram['budget_bytes']:,} B" if sram["budget_bytes"] is not None else ""
    lines.append(f"SRAM {sram['total_bytes']:,} B{budget}: arena {sram['arena_bytes']:,} + temp allocator "
                 f"(NPU scratch, largest call) {sram['temp_allocator_bytes']:,} + method allocator "
                 f"~{sram['method_allocator_bytes']:,}; "
                 f"flash (.pte) {memory['flash']['pte_bytes']:,} B")
    return lines
