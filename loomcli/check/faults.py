"""The status buffer of an instrumented launch, on the host (LANGUAGE.md 17.37).

`loomcli.passes.instrument` appends a status buffer to each kernel of a
`loom test` build; any device runner (`check.launch` for Vulkan) passes it
as the kernel's last buffer: `status_buffer` gives its first bytes (the
byte lengths of the kernel's buffers, the rest zero), and after the launch
`fault_diagnostic` turns what the kernel recorded into the diagnostic the
reference interpreter gives for the same fault. The record is replayed
through the interpreter's own checks (`View.address`, `check_window`, the
folders), so the two report the same code, view, indices and reason.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from loomcli.check.interpreter import OutOfBounds, Root, View, check_window, exec_diagnostic, exec_failure
from loomcli.diagnostics import Diagnostic
from loomcli.ir.types import ShapedType
from loomcli.passes.instrument import RECORD_AT, KernelProbe, Site
from loomcli.semantics.evaluate import EvaluationError
from loomcli.semantics.fold import FOLDERS, canonical

_WORD_CODES = {4: "i", 8: "q"}


class _Length(bytearray):
    """A root the host does not hold: only its length matters to `View.address`."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def __len__(self) -> int:
        return self.n


def status_buffer(probe: KernelProbe, buffer_bytes: Sequence[int]) -> bytes:
    """The status buffer before a launch: zero faults, then the byte length
    of each of the kernel's buffers, in parameter order."""
    data = bytearray(probe.status_bytes)
    code = "<" + _WORD_CODES[probe.word_bytes]
    for k, n in enumerate(buffer_bytes):
        struct.pack_into(code, data, RECORD_AT + k * probe.word_bytes, n)
    return bytes(data)


def fault_count(data: bytes) -> int:
    return int(struct.unpack_from("<I", data)[0])


def fault_diagnostic(probe: KernelProbe, data: bytes, path: str) -> Diagnostic | None:
    """The first fault the launch recorded, as the interpreter reports it; None without one."""
    if fault_count(data) == 0:
        return None
    size = probe.word_bytes
    count = probe.record_word + 1 + probe.payload_words
    words = struct.unpack_from(f"<{count}{_WORD_CODES[size]}", data, RECORD_AT)
    site_no = words[probe.record_word] - 1   # the kernel counts sites from 1
    if not 0 <= site_no < len(probe.sites):
        raise ValueError(f"the status buffer of @{probe.kernel} names site {site_no} of {len(probe.sites)}")
    site = probe.sites[site_no]
    payload = list(words[probe.record_word + 1:])
    return exec_diagnostic(exec_failure(site.op, _replay(site, payload)), path, probe.kernel)


def _replay(site: Site, payload: list[int]) -> EvaluationError:
    """The interpreter's error for the recorded fault."""
    r = site.rank
    try:
        if site.kind == "access":
            _replay_access(site, payload)
        elif site.kind == "subview":
            check_window(site.view, payload[:r], payload[r:2 * r], payload[2 * r:3 * r])
        else:
            op = site.op
            t = op.operands[0].type
            FOLDERS[op.opdef.name](op, [canonical(payload[0], t), canonical(payload[1], t)], None)
    except EvaluationError as e:
        return e
    # The device saw a fault the interpreter's checks do not: say what it recorded.
    return OutOfBounds(site.view or site.op.name, payload[:r] if r else payload[:2], payload[r:2 * r])


def _replay_access(site: Site, payload: list[int]) -> None:
    r = site.rank
    idx, extents = payload[:r], payload[r:2 * r]
    if site.lanes == 1:   # scalar accesses record indices and extents only
        strides, base, root_bytes = [0] * r, 0, -1
    else:
        strides, base, root_bytes = payload[2 * r:3 * r], payload[3 * r], payload[3 * r + 1]
    t: Any = site.op.operand("view").type
    assert isinstance(t, ShapedType)
    # An unknown root (-1): only the extents were checked on the device.
    length = root_bytes if root_bytes >= 0 else 1 << 62
    view = View(Root(_Length(length), site.view), base, tuple(extents), tuple(strides), t.elem, site.view)
    if not idx:
        view.address(idx)
    for k in range(site.lanes if idx else 0):
        view.address([*idx[:-1], idx[-1] + k])


__all__ = ["fault_count", "fault_diagnostic", "status_buffer"]
