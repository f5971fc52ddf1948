"""Row softmax in Triton, one program per row; the knobs may be set by lines above this one."""

import torch
import triton
import triton.language as tl

CHUNK = globals().get("CHUNK", 128)
ONLINE = globals().get("ONLINE", False)
SINGLE = globals().get("SINGLE", False)
NUM_WARPS = globals().get("NUM_WARPS", 4)
NEG = tl.constexpr(-1e30)  # a finite "minus infinity": exp(NEG - NEG) must not be NaN


@triton.jit
def _three_pass(x_ptr, y_ptr, cols, CHUNK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * cols
    offs = tl.arange(0, CHUNK)
    m = tl.full([CHUNK], NEG, tl.float32)
    for start in range(0, cols, CHUNK):
        x = tl.load(x_ptr + base + start + offs, mask=start + offs < cols, other=NEG)
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    s = tl.zeros([CHUNK], tl.float32)
    for start in range(0, cols, CHUNK):
        mask = start + offs < cols
        x = tl.load(x_ptr + base + start + offs, mask=mask, other=NEG)
        s += tl.where(mask, tl.exp(x - row_max), 0.0)
    total = tl.sum(s, axis=0)
    for start in range(0, cols, CHUNK):
        mask = start + offs < cols
        x = tl.load(x_ptr + base + start + offs, mask=mask, other=NEG)
        tl.store(y_ptr + base + start + offs, tl.exp(x - row_max) / total, mask=mask)


@triton.jit
def _online(x_ptr, y_ptr, cols, CHUNK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * cols
    offs = tl.arange(0, CHUNK)
    m = tl.full([CHUNK], NEG, tl.float32)
    s = tl.zeros([CHUNK], tl.float32)
    for start in range(0, cols, CHUNK):
        mask = start + offs < cols
        x = tl.load(x_ptr + base + start + offs, mask=mask, other=NEG)
        new_m = tl.maximum(m, x)
        s = s * tl.exp(m - new_m) + tl.where(mask, tl.exp(x - new_m), 0.0)
        m = new_m
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, cols, CHUNK):
        mask = start + offs < cols
        x = tl.load(x_ptr + base + start + offs, mask=mask, other=NEG)
        tl.store(y_ptr + base + start + offs, tl.exp(x - row_max) / total, mask=mask)


@triton.jit
def _single(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * cols
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + base + offs, mask=mask, other=NEG)
    e = tl.where(mask, tl.exp(x - tl.max(x, axis=0)), 0.0)
    tl.store(y_ptr + base + offs, e / tl.sum(e, axis=0), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    if SINGLE and cols <= 16384:
        _single[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols), num_warps=NUM_WARPS)
    else:
        kernel = _online if ONLINE else _three_pass
        kernel[(rows,)](x, y, cols, CHUNK=CHUNK, num_warps=NUM_WARPS)
    return y
