"""The I/O floor of lowering a model: read every weight once, convert it to float16, write one file.

    python bench/io_floor.py OUT.bin SHARD.safetensors [SHARD ...]

What any tool that writes a model's `.bin` must at least do; `bench_model.py` runs it side by
side with `qlower lower` on the same shards.
"""

from __future__ import annotations

import sys

import numpy as np
from safetensors import safe_open


def main(argv: list[str]) -> int:
    out, shards = argv[0], argv[1:]
    total = 0
    with open(out, "wb") as f:
        for shard in shards:
            with safe_open(shard, framework="numpy") as st:
                for key in st.keys():
                    data = st.get_tensor(key).astype(np.float16)
                    f.write(memoryview(data).cast("B"))
                    total += data.nbytes
                    del data
    print(f"wrote {total / 2**30:.2f} GiB of float16 to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
