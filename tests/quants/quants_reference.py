#!/usr/bin/env python3
"""Reference (de)quantizer for tests/model/quants_test.cpp.

Usage: quants_reference.py MANIFEST

Each MANIFEST line is "OP TYPE N_PER_ROW IN OUT":
  quantize    IN holds float32 rows of N_PER_ROW values; OUT receives the quantized bytes.
  dequantize  IN holds quantized rows of N_PER_ROW elements; OUT receives float32 values.

Everything goes through the gguf package's gguf.quants.quantize / dequantize, except quantization
to Q4_K, Q5_K and Q6_K: gguf.quants (0.19) has no quantizer for those, so those go through ggml's
own reference quantizers (quantize_row_q{4,5,6}_K_ref in ggml-quants.c), loaded from the
libggml-python package with ctypes. This file also carries a numpy port of the Q4_K and Q6_K
quantizers (vectorised across blocks, every value float32, each operation rounded separately, sums
in ggml's sequential order); every call checks that the port agrees with ggml byte for byte.
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

F = np.float32
GROUP_MAX_EPS = F(1e-15)


def nearest_int(v):
    """ggml's nearest_int: add 1.5 * 2^23 in float32, read the integer from the mantissa bits."""
    t = np.asarray(v, dtype=F) + F(12582912.0)
    return (t.view(np.int32) & 0x007FFFFF) - 0x00400000


def seq_sum(terms):
    """Sum over the last axis left to right from 0, as a C loop does (numpy's sum is pairwise)."""
    s = np.zeros(terms.shape[:-1], dtype=F)
    for i in range(terms.shape[-1]):
        s = s + terms[..., i]
    return s


def make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep):
    """ggml make_qkx2_quants (use_mad false) on rows of x [B, n]: (scale [B], -min [B], L [B, n])."""
    n = x.shape[1]
    mn = x[:, 0].copy()
    mx = x[:, 0].copy()
    sum_w = w[:, 0].copy()
    sum_x = sum_w * x[:, 0]
    for i in range(1, n):
        mn = np.where(x[:, i] < mn, x[:, i], mn)
        mx = np.where(x[:, i] > mx, x[:, i], mx)
        sum_w = sum_w + w[:, i]
        sum_x = sum_x + w[:, i] * x[:, i]
    mn = np.where(mn > 0, F(0), mn)
    flat = mx == mn
    fnmax = F(nmax)
    with np.errstate(all="ignore"):
        rng = mx - mn
        iscale = fnmax / rng
        scale = F(1) / iscale
        xm = x - mn[:, None]
        L = np.clip(nearest_int(iscale[:, None] * xm), 0, nmax)
        diff = scale[:, None] * L.astype(F) + mn[:, None] - x
        best = seq_sum(w * (diff * diff))
        for step in range(nstep + 1):
            # min moves when a trial wins, and later trials measure from the new min
            rng = mx - mn
            xm = x - mn[:, None]
            iscale = (F(rmin) + F(rdelta) * F(step) + fnmax) / rng
            laux = np.clip(nearest_int(iscale[:, None] * xm), 0, nmax)
            lf = laux.astype(F)
            wl = w * lf
            sum_l = seq_sum(wl)
            sum_l2 = seq_sum(wl * lf)
            sum_xl = seq_sum(wl * x)
            D = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            pos = this_min > 0
            this_min = np.where(pos, F(0), this_min)
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale)
            diff = this_scale[:, None] * lf + this_min[:, None] - x
            cur = seq_sum(w * (diff * diff))
            upd = (D > 0) & (cur < best) & ~flat
            L = np.where(upd[:, None], laux, L)
            best = np.where(upd, cur, best)
            scale = np.where(upd, this_scale, scale)
            mn = np.where(upd, this_min, mn)
    L = np.where(flat[:, None], 0, L)
    scale = np.where(flat, F(0), scale).astype(F)
    return scale, (-mn).astype(F), L


def make_qx_quants(x, nmax):
    """ggml make_qx_quants (rmse_type 1, no importance weights) on rows of x [B, n]: (scale, L)."""
    n = x.shape[1]
    amax = np.zeros(x.shape[0], dtype=F)
    mx = np.zeros(x.shape[0], dtype=F)
    for i in range(n):
        ax = np.abs(x[:, i])
        upd = ax > amax
        amax = np.where(upd, ax, amax)
        mx = np.where(upd, x[:, i], mx)
    zero = amax < GROUP_MAX_EPS
    w = x * x
    wx = w * x

    def levels(iscale):
        l = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        lf = l.astype(F)
        return l, seq_sum(wx * lf), seq_sum((w * lf) * lf)

    with np.errstate(all="ignore"):
        iscale = F(-nmax) / mx
        l, sumlx, suml2 = levels(iscale)
        L = l + nmax
        scale = np.where(suml2 != 0, sumlx / suml2, F(0)).astype(F)
        best = scale * sumlx
        for step in range(-9, 10):
            if step == 0:
                continue
            iscale = -(F(nmax) + F(0.1) * F(step)) / mx
            l, sumlx, suml2 = levels(iscale)
            upd = (suml2 > 0) & (sumlx * sumlx > best * suml2) & ~zero
            L = np.where(upd[:, None], l + nmax, L)
            scale = np.where(upd, sumlx / suml2, scale)
            best = np.where(upd, scale * sumlx, best)
    L = np.where(zero[:, None], 0, L)
    scale = np.where(zero, F(0), scale).astype(F)
    return scale, L


def seq_max_positive(v):
    """max over the last axis of 'if (v > m) m = v' starting from m = 0 (ggml's max_scale loops)."""
    m = np.zeros(v.shape[:-1], dtype=F)
    for j in range(v.shape[-1]):
        m = np.where(v[..., j] > m, v[..., j], m)
    return m


def fp16_bits(v):
    return np.asarray(v, dtype=F).astype(np.float16).view(np.uint16)


def quantize_q4_k(rows):
    x = rows.reshape(-1, 256).astype(F)
    nb = x.shape[0]
    xs = x.reshape(nb * 8, 32)
    av_x = np.sqrt(seq_sum(xs * xs) / F(32))
    w = av_x[:, None] + np.abs(xs)
    scales, mins, L = make_qkx2_quants(xs, w, 15, -1.0, 0.1, 20)
    scales = scales.reshape(nb, 8)
    mins = mins.reshape(nb, 8)
    L = L.reshape(nb, 256)
    max_scale = seq_max_positive(scales)
    max_min = seq_max_positive(mins)
    with np.errstate(all="ignore"):
        inv_scale = np.where(max_scale > 0, F(63) / max_scale, F(0)).astype(F)
        inv_min = np.where(max_min > 0, F(63) / max_min, F(0)).astype(F)
    ls = np.minimum(nearest_int(inv_scale[:, None] * scales).astype(np.uint8), 63)
    lm = np.minimum(nearest_int(inv_min[:, None] * mins).astype(np.uint8), 63)
    sb = np.zeros((nb, 12), dtype=np.uint8)
    sb[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    sb[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    sb[:, 8:12] = (ls[:, 4:8] & 0x0F) | ((lm[:, 4:8] & 0x0F) << 4)
    d16 = fp16_bits(max_scale / F(63))
    dmin16 = fp16_bits(max_min / F(63))
    # requantize with the rounded scales, as ggml reads them back from the block
    d = d16.view(np.float16).astype(F)[:, None] * ls.astype(F)
    dm = dmin16.view(np.float16).astype(F)[:, None] * lm.astype(F)
    xr = x.reshape(nb, 8, 32)
    with np.errstate(all="ignore"):
        lnew = np.clip(nearest_int((xr + dm[:, :, None]) / d[:, :, None]), 0, 15)
    L = np.where((d != 0)[:, :, None], lnew, L.reshape(nb, 8, 32)).astype(np.uint8).reshape(nb, 4, 2, 32)
    qs = (L[:, :, 0, :] | (L[:, :, 1, :] << 4)).reshape(nb, 128)
    return np.concatenate([d16.reshape(nb, 1).view(np.uint8), dmin16.reshape(nb, 1).view(np.uint8), sb, qs], axis=1)


def quantize_q6_k(rows):
    x = rows.reshape(-1, 256).astype(F)
    nb = x.shape[0]
    scales, L = make_qx_quants(x.reshape(nb * 16, 16), 32)
    scales = scales.reshape(nb, 16)
    L = L.reshape(nb, 16, 16)
    max_abs = np.zeros(nb, dtype=F)
    max_scale = np.zeros(nb, dtype=F)
    for j in range(16):
        a = np.abs(scales[:, j])
        upd = a > max_abs
        max_abs = np.where(upd, a, max_abs)
        max_scale = np.where(upd, scales[:, j], max_scale)
    zero = max_abs < GROUP_MAX_EPS
    with np.errstate(all="ignore"):
        iscale = F(-128) / max_scale
        d16 = np.where(zero, np.uint16(0), fp16_bits(F(1) / iscale))
        sc = np.minimum(nearest_int(iscale[:, None] * scales), 127).astype(np.int8)
        d = d16.view(np.float16).astype(F)[:, None] * sc.astype(F)
        lnew = np.clip(nearest_int(x.reshape(nb, 16, 16) / d[:, :, None]), -32, 31) + 32
    L = np.where((d != 0)[:, :, None], lnew, L).astype(np.uint8).reshape(nb, 2, 4, 32)
    # element 128 c + 32 k + l: low nibble in ql[64 c + 32 (k % 2) + l] (k < 2: bits 0-3), high
    # two bits at shift 2 k of qh[32 c + l]
    lo = L & 0x0F
    ql = np.concatenate([lo[:, :, 0, :] | (lo[:, :, 2, :] << 4), lo[:, :, 1, :] | (lo[:, :, 3, :] << 4)],
                        axis=2).reshape(nb, 128)
    hi = L >> 4
    qh = (hi[:, :, 0, :] | (hi[:, :, 1, :] << 2) | (hi[:, :, 2, :] << 4) | (hi[:, :, 3, :] << 6)).reshape(nb, 64)
    out = np.concatenate([ql, qh, sc.view(np.uint8), d16.reshape(nb, 1).view(np.uint8)], axis=1)
    out[zero] = 0
    return out


PORTED = {T.Q4_K: quantize_q4_k, T.Q6_K: quantize_q6_k}
GGML_REF = {T.Q4_K: ("quantize_row_q4_K_ref", 144), T.Q5_K: ("quantize_row_q5_K_ref", 176),
            T.Q6_K: ("quantize_row_q6_K_ref", 210)}
_ggml = None


def ggml_library():
    """ggml's own C library from the libggml-python package (a test requirement)."""
    global _ggml
    if _ggml is None:
        import ctypes
        import glob
        import importlib.util
        spec = importlib.util.find_spec("libggml")
        roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
        hits = sorted(h for r in roots for h in glob.glob(os.path.join(r, "**", "libggml-base.so*"),
                                                           recursive=True))
        if not hits:
            raise SystemExit("libggml-base.so not found: install libggml-python (scripts/setup.sh)")
        _ggml = ctypes.CDLL(hits[0])
    return _ggml


def quantize_with_ggml(rows, qtype):
    """Q4_K / Q5_K / Q6_K through ggml's reference quantizers (quantize_row_*_ref), via ctypes."""
    import ctypes
    name, type_size = GGML_REF[qtype]
    fn = getattr(ggml_library(), name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn.restype = None
    x = np.ascontiguousarray(rows, dtype=F)
    out = np.zeros(x.size // 256 * type_size, dtype=np.uint8)
    fn(x.ctypes.data, out.ctypes.data, x.size)
    return out.reshape(x.shape[0], -1)


def run(op, type_name, n_per_row, src, dst):
    qtype = T[type_name]
    block_size, type_size = gq.GGML_QUANT_SIZES[qtype]
    if op == "quantize":
        rows = np.fromfile(src, dtype=F).reshape(-1, n_per_row)
        if qtype in GGML_REF:
            # gguf.quants has no K-quant quantizers: ggml's own C code is the reference, and the
            # numpy port beside it must agree with it on every call.
            out = quantize_with_ggml(rows, qtype)
            if qtype in PORTED:
                port = np.ascontiguousarray(PORTED[qtype](rows)).view(np.uint8).reshape(out.shape)
                if not np.array_equal(port, out):
                    raise SystemExit(f"numpy port of {type_name} disagrees with ggml's reference")
        else:
            out = gq.quantize(rows, qtype)
        np.ascontiguousarray(out).view(np.uint8).tofile(dst)
    elif op == "dequantize":
        raw = np.fromfile(src, dtype=np.uint8).reshape(-1, n_per_row // block_size * type_size)
        out = gq.dequantize(raw, qtype)
        np.ascontiguousarray(out, dtype=F).tofile(dst)
    else:
        raise SystemExit(f"unknown op {op}")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        for line in f:
            parts = line.split()
            if parts:
                run(parts[0], parts[1], int(parts[2]), parts[3], parts[4])


if __name__ == "__main__":
    main()
