"""What a reference kernel is told about the results it must produce."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from qlower.qnn.model import QuantEncoding


@attrs.frozen
class OutSpec:
    """Declared dtype, shape and (optional) encoding of one result.

    `shape` is None when the caller wants the kernel to tell it (building a
    test graph, where results are typed by running the source semantics).
    """

    shape: tuple[int, ...] | None = attrs.field(converter=lambda s: None if s is None else tuple(s))
    dtype: np.dtype = attrs.field(converter=np.dtype)
    encoding: QuantEncoding | None = None


# kernel(inputs, params_or_attrs, outs) -> one array per result.
# `inputs` holds None for an omitted optional input.
Kernel = Callable[[Sequence["np.ndarray | None"], Mapping[str, Any], Sequence[OutSpec]], list[np.ndarray]]


class KernelError(Exception):
    """A kernel was given inputs or params it cannot compute with."""
